from opatlas.cli import main

main()
