# bench/local.mk: benchmarks (not tests); results recorded in bench/BENCHMARKS.md.
EXTRA_DIST += bench/BENCHMARKS.md bench/ncu_decode_h200_2026-12-03.csv bench/bench_exl3_h200_2026-12-02-main.txt
