# bench/local.mk: benchmarks (not tests); results recorded in bench/BENCHMARKS.md.
EXTRA_DIST += bench/BENCHMARKS.md
