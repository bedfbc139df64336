"""ZigZag (PyPI zigzag-dse 3.9.1) on the Fig. 24b job, for docs/accel_mappers.md.

Not part of the test suite (ZigZag is not a dependency). Usage:
    pip install zigzag-dse six      # six: an undeclared dependency of zigzag 3.9.1
    python benchmarks/library_eval/zigzag_eval.py GLB_BYTES [MAPPINGS]

Evaluates every LOMA temporal mapping of the 4096³ GEMM (up to MAPPINGS) with ZigZag's cost
model and prints the count, the rate and the smallest DRAM traffic found.
"""

from __future__ import annotations

import itertools
import logging
import sys
import tempfile
import time
from pathlib import Path

from zigzag.mapping.temporal_mapping import TemporalMappingType
from zigzag.stages.evaluation.cost_model_evaluation import CostModelStage
from zigzag.stages.main import MainStage
from zigzag.stages.mapping.spatial_mapping_generation import SpatialMappingGeneratorStage
from zigzag.stages.mapping.temporal_mapping_generator_stage import TemporalMappingGeneratorStage
from zigzag.stages.parser.accelerator_parser import AcceleratorParserStage
from zigzag.stages.parser.workload_parser import WorkloadParserStage
from zigzag.stages.stage import Stage
from zigzag.stages.workload_iterator import WorkloadStage

HERE = Path(__file__).parent
LIMIT = int(sys.argv[2]) if len(sys.argv) > 2 else 2000


class TakeN(Stage):
    """Pass on the first LIMIT cost-model evaluations, all of them (no reduction)."""

    def run(self):
        sub = self.list_of_callables[0](self.list_of_callables[1:], **self.kwargs)
        yield from itertools.islice(sub.run(), LIMIT)


def main() -> None:
    logging.disable(logging.CRITICAL)
    glb_bytes = int(sys.argv[1])
    arch = (HERE / "zigzag_simba.yaml").read_text().replace("size: 524288", f"size: {8 * glb_bytes}")
    with tempfile.TemporaryDirectory() as tmp:
        arch_path = Path(tmp) / "simba.yaml"
        arch_path.write_text(arch)
        stage = MainStage(
            [WorkloadParserStage, AcceleratorParserStage, WorkloadStage,
             SpatialMappingGeneratorStage, TakeN, TemporalMappingGeneratorStage, CostModelStage],
            accelerator=str(arch_path), workload=str(HERE / "zigzag_gemm4096.yaml"),
            mapping=str(HERE / "zigzag_mapping.yaml"), dump_folder=tmp, loma_lpf_limit=6,
            loma_show_progress_bar=False, nb_mappings_generated=1,
            enable_mix_spatial_mapping_generation=False,
            access_same_data_considered_as_no_access=True,
            temporal_mapping_type=TemporalMappingType("uneven"))
        t0 = time.perf_counter()
        cmes = [cme for cme, _ in stage.run()]
        seconds = time.perf_counter() - t0
    # DRAM is the last level of every operand; its word is 64 bits = 8 elements
    dram = [8 * sum(sum(acc.data.values()) for acc in
                    (cme.memory_word_access[op][-1] for op in cme.memory_word_access))
            for cme in cmes]
    print(f"GLB {glb_bytes} B: {len(cmes)} mappings in {seconds:.2f} s "
          f"({len(cmes) / seconds:.1f}/s); fewest DRAM accesses {min(dram):.4g}")


if __name__ == "__main__":
    main()
