"""The terminal app (Textual), PyBuda Perf Analyzer's layout and keys: a summary screen, a
per-stage (epoch, device) op table sorted slowest first, an op detail screen.

Keys (lowercase, as bound below): s summary, e stage table, t the summary's tables (per-epoch
summary, per-op-code totals ...), n/p next/previous stage (on the summary's tables: the
next/previous table), f full op names, r reload (a source read again; an analysis opened with
--load has none to reread: said), h help, q quit, arrows and j/k to move (every screen with a
table), Enter for a stage's table (summary) or
an op's detail, Esc back (from the detail also Backspace), < and > (or a header click) to sort
by another column (again: reverse), [ and ] for the previous/next page of a big table."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import pandas as pd
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Header, Static, TabbedContent, TabPane

from opatlas.analyze.model import Analysis, Column
from opatlas.analyze.tables import (
    detail_tables,
    fmt,
    fmt_seconds,
    group_summary,
    group_util_label,
    header,
    highlight,
    missing,
    op_label,
    summary_items,
    unit_of,
    visible_columns,
)

PAGE_ROWS = 500  # DataTable slows down on very large tables: show them a page at a time
SHORT_NAME = 28
STYLE = {"good": "bold green", "warn": "bold yellow", "bad": "bold red"}
HELP = """[b]opatlas analyze[/b] — keys (lowercase)

  [b]s[/b]  summary            [b]e[/b]  stage / epoch / device op table
  [b]t[/b]  the summary's tables (per-epoch summary, per-op-code totals, top ops ...)
  [b]n[/b]  next stage         [b]p[/b]  previous stage  (the summary's tables: next / previous)
  [b]f[/b]  full op names      [b]r[/b]  reload the source  (--load: nothing to reread)
  [b]↑ ↓ j k[/b]  move         [b]Enter[/b]  the stage's table (summary), the op's detail (table)
  [b]< >[/b]  sort by the previous / next column (again: reverse); a header click sorts too
  [b][ ][/b]  previous / next page of a big table
  [b]h[/b]  this help (again: close it)                [b]q[/b]  quit
  [b]Esc[/b]  back from the op's detail or this help (from the detail, [b]Backspace[/b] too)

Colours as PyBuda: utilization [green]green > 50%[/], [red]red < 25%[/];
estimate vs measured [yellow]yellow at ≥ 20% off[/], [red]red at ≥ 50%[/]."""


def styled(value: Any, col: Column | None, full: bool = True) -> Text:
    text = fmt(value, col)
    if not full and col is not None and col.role in ("id", "text") and len(text) > SHORT_NAME:
        text = text[:SHORT_NAME - 1] + "…"
    h = highlight(value, col)
    return Text(text, style=STYLE[h] if h else "",
                justify="left" if col is None or col.role in ("id", "group", "text", "shape")
                else "right")


# the keys every screen with a table has: j/k move its cursor as the arrows do, n/p go to the
# next/previous stage (the summary's tables: the next/previous table)
MOVE_KEYS: list[Binding] = [
    Binding("n", "group(1)", "next"), Binding("p", "group(-1)", "previous"),
    Binding("j", "move(1)", "down", show=False), Binding("k", "move(-1)", "up", show=False)]
# a modal screen (detail, help) hides the app's bindings: each binds q itself, as HELP says
QUIT = Binding("q", "app.quit", "quit")


def move_cursor(table: DataTable, step: int) -> None:
    """The cursor ``step`` rows down (up where negative), kept on the table."""
    if table.row_count:
        table.move_cursor(row=min(max(0, table.cursor_row + step), table.row_count - 1))


class SummaryScreen(Screen):
    BINDINGS: ClassVar = [Binding("enter", "open_group", "open stage", show=False),
                          *[replace(b, show=False) for b in MOVE_KEYS]]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="cards")
        yield DataTable(id="groups", cursor_type="row", zebra_stripes=True)
        yield Static(id="notes")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_data()

    def refresh_data(self) -> None:
        a: Analysis = self.app.analysis  # type: ignore[attr-defined]
        self.title = str(a.summary.get("title", a.source.path))
        self.sub_title = f"{a.source.kind}: {a.source.path}"
        cards = Text()
        for label, value, h in summary_items(a):
            cards.append(f"{label}: ", style="dim")
            cards.append(value, style=STYLE[h] if h else "bold")
            cards.append("   ")
        self.query_one("#cards", Static).update(cards)
        table = self.query_one("#groups", DataTable)
        table.clear(columns=True)
        util = (group_util_label(a) or ("util",))[0]
        table.add_columns(a.group_label, "time", "share", "slowest op", "its time", util,
                          "comm share", "rows")
        util_col = Column(key="util", label=util, role="util", unit="%")
        pct = Column(key="p", label="p", unit="%")
        for g in group_summary(a).to_dict("records"):
            table.add_row(g["group"], fmt_seconds(g["time_s"]), fmt(g["share"], pct),
                          g["slowest_op"], fmt_seconds(g["slowest_time_s"]),
                          styled(g["util"], util_col), fmt(g["comm_share"], pct), str(g["rows"]),
                          key=str(g["group"]))
        if table.row_count:  # on the stage the op table shows (e, n, p)
            gi = self.app.group_index  # type: ignore[attr-defined]
            table.move_cursor(row=gi % table.row_count)
        notes = a.summary.get("notes") or []
        self.query_one("#notes", Static).update("\n".join(f"note: {n}" for n in notes))

    def action_move(self, step: int) -> None:
        move_cursor(self.query_one("#groups", DataTable), step)

    def action_group(self, step: int) -> None:
        """The next/previous stage (from the last, the first): the cursor's row, the stage
        ``e`` opens."""
        table = self.query_one("#groups", DataTable)
        if table.row_count:
            table.move_cursor(row=(table.cursor_row + step) % table.row_count)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """The stage under the cursor is the one ``e`` (and n/p on the op table) starts at."""
        if event.data_table.id == "groups" and event.data_table.row_count:
            self.app.group_index = event.cursor_row  # type: ignore[attr-defined]

    def action_open_group(self) -> None:
        table = self.query_one("#groups", DataTable)
        if table.row_count:
            self.app.group_index = table.cursor_row  # type: ignore[attr-defined]
            self.app.action_stage()  # type: ignore[attr-defined]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.app.group_index = event.cursor_row  # type: ignore[attr-defined]
        self.app.action_stage()  # type: ignore[attr-defined]


class StageScreen(Screen):
    BINDINGS: ClassVar = [
        *MOVE_KEYS, Binding("f", "full", "full names"),
        Binding("less_than_sign", "sort(-1)", "sort ←"),
        Binding("greater_than_sign", "sort(1)", "sort →"),
        Binding("right_square_bracket", "page(1)", "next page", show=False),
        Binding("left_square_bracket", "page(-1)", "previous page", show=False)]

    def __init__(self) -> None:
        super().__init__()
        self.sort_key, self.descending, self.page, self.full = "time_s", True, 0, False
        self.rows = pd.DataFrame()

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="ops", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_data()

    @property
    def columns(self) -> list[Column]:
        cols = [c for c in visible_columns(self.app.analysis)  # type: ignore[attr-defined]
                if c.role != "group"]
        return cols if self.full else [c for c in cols if c.role != "shape"]

    def refresh_data(self) -> None:
        a: Analysis = self.app.analysis  # type: ignore[attr-defined]
        groups = a.groups()
        gi = self.app.group_index % max(1, len(groups))  # type: ignore[attr-defined]
        group = groups[gi] if groups else None
        rows = a.rows[a.rows["group"].astype(str) == str(group)] if groups else a.rows
        if self.sort_key in rows:
            key = rows[self.sort_key].map(lambda v: str(v) if isinstance(v, dict | list) else v)
            order = key.sort_values(ascending=not self.descending, na_position="last",
                                    kind="stable").index
            rows = rows.loc[order]
        self.rows = rows
        pages = max(1, -(-len(rows) // PAGE_ROWS))
        self.page = min(max(self.page, 0), pages - 1)
        shown = rows.iloc[self.page * PAGE_ROWS:(self.page + 1) * PAGE_ROWS]
        table = self.query_one("#ops", DataTable)
        table.clear(columns=True)
        for c in self.columns:
            arrow = (" ▼" if self.descending else " ▲") if c.key == self.sort_key else ""
            table.add_column(header(c) + arrow, key=c.key)
        for idx, r in shown.iterrows():
            table.add_row(*[styled(r[c.key], c, self.full) for c in self.columns], key=str(idx))
        self.title = str(a.summary.get("title", a.source.path))
        which = f" ({gi + 1} of {len(groups)})" if len(groups) > 1 else ""
        self.sub_title = (f"{a.group_label} {group}{which} · {len(rows)} rows, "
                          f"page {self.page + 1} of {pages} · sorted by {self.sort_label()} "
                          f"{'descending' if self.descending else 'ascending'}")

    def sort_label(self) -> str:
        return next((c.label for c in self.columns if c.key == self.sort_key), self.sort_key)

    def action_group(self, step: int) -> None:
        self.app.group_index += step  # type: ignore[attr-defined]
        self.page = 0
        self.refresh_data()

    def action_full(self) -> None:
        self.full = not self.full
        self.refresh_data()

    def action_move(self, step: int) -> None:
        move_cursor(self.query_one("#ops", DataTable), step)

    def action_page(self, step: int) -> None:
        self.page += step
        self.refresh_data()

    def set_sort(self, key: str) -> None:
        if key == self.sort_key:
            self.descending = not self.descending
        else:
            self.sort_key = key
            col = next((c for c in self.columns if c.key == key), None)
            self.descending = col is None or col.role not in ("id", "text", "shape")
        self.refresh_data()

    def action_sort(self, step: int) -> None:
        keys = [c.key for c in self.columns]
        i = keys.index(self.sort_key) if self.sort_key in keys else 0
        self.set_sort(keys[(i + step) % len(keys)])

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self.set_sort(str(event.column_key.value))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        row = self.app.analysis.rows.loc[int(event.row_key.value)]  # type: ignore[attr-defined]
        self.app.push_screen(DetailScreen(row))


LABEL_WIDTH = 30  # the detail's label column at most (a longer label: two spaces, its value)
# a row's flags said only when set, with what they mean (the tt-metal source's
# invalid_duration: tt-perf-report rejected the row's DEVICE KERNEL DURATION [ns])
FLAGS = {"invalid_duration": ("invalid duration", "yes: its device kernel duration is missing "
                                                  "or invalid (time 0, left out of every total)")}


def extra_figure(key: str, value: Any) -> tuple[str, Text] | None:
    """A row's field outside the table as (label, value) for the detail, None where it says
    nothing: a flag (:data:`FLAGS`) that is not set."""
    if key in FLAGS:
        if not value:  # False, numpy's False, 0
            return None
        label, said = FLAGS[key]
        return label, Text(said, style=STYLE["bad"])
    unit = unit_of(key)  # a time (_s, _ns, _us) with its unit, a rate as a rate
    return key, styled(value, Column(key=key, label=key, unit=unit, role="count"))


def time_said(analysis: Analysis) -> str:
    """What the rows' time is (per step, per input, per call ...), as its column says."""
    col = next((c for c in analysis.columns if c.key == "time_s"), None)
    if col is None or (col.label == "time" and not col.help):
        return "time"
    said = [w for w in (col.label if col.label != "time" else "", col.help) if w]
    return "time: " + ", ".join(said)


class DetailScreen(ModalScreen):
    """One op: every figure, its position against the roofline and bounds, measured samples."""

    BINDINGS: ClassVar = [Binding("escape", "app.pop_screen", "back"),
                          Binding("backspace", "app.pop_screen", "back", show=False), QUIT]

    def __init__(self, row: pd.Series) -> None:
        super().__init__()
        self.row = row

    def compose(self) -> ComposeResult:
        yield Static(self.render_detail(), id="detail")
        yield Footer()

    def render_detail(self) -> Text:
        a: Analysis = self.app.analysis  # type: ignore[attr-defined]
        r = self.row
        out = Text(f"{op_label(r['op'], r['pass'])}\n", style="bold")
        figures = [(header(c), styled(r[c.key], c)) for c in visible_columns(a)
                   if c.key not in ("op", "pass")]
        shown = {c.key for c in visible_columns(a)} | {"group", "gemm"}
        # what the source knows beyond the table: a measurement's spread ...
        extra = [fig for k in r.index if k not in shown and not missing(r[k])
                 for fig in [extra_figure(k, r[k])] if fig is not None]
        width = min(LABEL_WIDTH, max((len(label) for label, _ in figures + extra), default=12) + 2)
        for i, (label, value) in enumerate([*figures, *extra]):
            if extra and i == len(figures):
                out.append("\n")
            # a label wider than the column keeps two spaces before its value
            out.append(f"  {label:<{width}}" if len(label) <= width - 2 else f"  {label}  ",
                       style="dim")
            out.append_text(value)
            out.append("\n")
        out.append(f"\nwhere it stands ({time_said(a)}; █ = its time)\n", style="bold")
        bars = [("time", r.get("time_s"))]
        bars += [(k, r.get(f"{k}_time_s")) for k in ("predicted", "measured", "roofline",
                                                      "orojenesis", "bound")]
        finite = [float(v) for _, v in bars if isinstance(v, int | float) and v == v and v > 0]
        top = max(finite) if finite else 0.0
        for label, v in bars:
            if not isinstance(v, int | float) or v != v or top <= 0:
                continue
            n = round(40 * float(v) / top)
            out.append(f"  {label:<11}{'█' * n:<41}{fmt_seconds(float(v))}\n")
        head = r.get("headroom")
        if isinstance(head, float) and head == head:
            out.append(f"\n  {head:.2f}x its bound: limited by {r.get('limiter')}\n", style="bold")
        return out


class TablesScreen(Screen):
    """The summary's own tables (``detail_tables``), one tab each: n/p the next/previous
    table, j/k (as the arrows) move in the one shown."""

    BINDINGS: ClassVar = [replace(b, description={"next": "next table", "previous":
                                                  "previous table"}.get(b.description,
                                                                        b.description))
                          for b in MOVE_KEYS]

    def compose(self) -> ComposeResult:
        yield Header()
        details = detail_tables(self.app.analysis)  # type: ignore[attr-defined]
        if not details:
            yield Static("no further tables in this analysis", id="cards")
        else:
            with TabbedContent():
                for i, d in enumerate(details):
                    title = d["title"] + (f" (first {len(d['rows'])} of {d['total']})"
                                          if d["total"] > len(d["rows"]) else "")
                    with TabPane(title, id=f"tab-{i}"):
                        yield DataTable(id=f"table-{i}", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        a: Analysis = self.app.analysis  # type: ignore[attr-defined]
        self.title, self.sub_title = "the summary's tables", f"{a.source.kind}: {a.source.path}"
        for i, d in enumerate(detail_tables(a)):
            table = self.query_one(f"#table-{i}", DataTable)
            keys = list(dict.fromkeys(k for r in d["rows"] for k in r))
            table.add_columns(*keys)
            for r in d["rows"]:
                table.add_row(*(styled(r.get(k), None) for k in keys))

    def _tabs(self) -> TabbedContent | None:
        found = self.query(TabbedContent)
        return found.first() if found else None

    def shown_table(self) -> DataTable | None:
        tabs = self._tabs()
        if tabs is None or not tabs.active:
            return None
        return tabs.get_pane(tabs.active).query_one(DataTable)

    def action_move(self, step: int) -> None:
        table = self.shown_table()
        if table is not None:
            move_cursor(table, step)

    def action_group(self, step: int) -> None:
        """The next/previous table (tab), its table focused for the arrows and j/k."""
        tabs = self._tabs()
        if tabs is None or not tabs.active:
            return
        panes = [str(p.id) for p in tabs.query(TabPane)]
        if tabs.active in panes:
            tabs.active = panes[(panes.index(tabs.active) + step) % len(panes)]
            table = self.shown_table()
            if table is not None:
                table.focus()


class HelpScreen(ModalScreen):
    BINDINGS: ClassVar = [Binding("escape", "app.pop_screen", "back"),
                          Binding("h", "app.pop_screen", "back", show=False), QUIT]

    def compose(self) -> ComposeResult:
        yield Static(HELP, id="help")
        yield Footer()


class AnalyzerApp(App):
    """``reload_args``: how to read the analysis again (``api.analyze``'s arguments)."""

    CSS = """
    #cards { padding: 1 1; height: auto; }
    #notes { padding: 0 1; color: $warning; height: auto; }
    DetailScreen, HelpScreen { align: center middle; }
    #detail, #help { width: 90; height: auto; max-height: 90%; border: round $accent;
                     background: $surface; padding: 1 2; overflow-y: auto; }
    """
    BINDINGS: ClassVar = [Binding("s", "summary", "summary"), Binding("e", "stage", "stage"),
                          Binding("t", "tables", "tables"), Binding("r", "reload", "reload"),
                          Binding("h", "help", "help"), Binding("q", "quit", "quit")]

    def __init__(self, analysis: Analysis, reload_args: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.analysis = analysis
        self.reload_args = reload_args or {}
        self.group_index = 0

    def on_mount(self) -> None:
        self.title = "opatlas analyze"
        self.push_screen(SummaryScreen())

    def _main_screen(self) -> Screen:
        while isinstance(self.screen, ModalScreen):
            self.pop_screen()
        return self.screen

    def action_summary(self) -> None:
        if not isinstance(self._main_screen(), SummaryScreen):
            self.switch_screen(SummaryScreen())

    def action_stage(self) -> None:
        screen = self._main_screen()
        if isinstance(screen, StageScreen):
            screen.refresh_data()
        else:
            self.switch_screen(StageScreen())

    def action_tables(self) -> None:
        if not isinstance(self._main_screen(), TablesScreen):
            self.switch_screen(TablesScreen())

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_reload(self) -> None:
        """Read the source again (a re-run, a refitted model, a new trace)."""
        from opatlas.analyze import api
        from opatlas.errors import OpatlasError

        args = {k: v for k, v in self.reload_args.items() if v is not None}
        source = args.pop("source", None)
        if not source:  # --load: the saved analysis, no source read (nor a file named)
            self.notify("nothing to reread: this analysis was opened as saved (--load), not "
                        "read from its source; open the saved file as the SOURCE (opatlas "
                        "analyze a.json) for r to read it again, or analyze the source",
                        severity="warning")
            return
        try:
            self.analysis = api.analyze(source, **args)
        except OpatlasError as exc:
            self.notify(str(exc), severity="error")
            return
        screen = self._main_screen()
        if isinstance(screen, SummaryScreen | StageScreen):
            screen.refresh_data()
        elif isinstance(screen, TablesScreen):
            self.switch_screen(TablesScreen())
        self.notify(f"reloaded {source}")
