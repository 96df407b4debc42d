from corl_bench.cli import main

main()
