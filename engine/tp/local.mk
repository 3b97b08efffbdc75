# engine/tp/local.mk: two or more ranks: the control protocol, bootstrap, heartbeat and the transports
# (tcp, rdma). Adds its sources to libengine.a (libengine_a_SOURCES +=).
libengine_a_SOURCES += \
	engine/tp/protocol.c engine/tp/protocol.h engine/tp/transport.h \
	engine/tp/tcp.c engine/tp/rdma_logic.c engine/tp/rdma_logic.h engine/tp/rdma.c \
	engine/tp/rdma.h engine/tp/rank.c engine/tp/rank.h engine/tp/split.c engine/tp/split.h \
	engine/tp/auth.c engine/tp/auth.h engine/tp/hmac_sha256.c engine/tp/hmac_sha256.h \
	engine/tp/listener.c engine/tp/listener.h engine/tp/group.c engine/tp/group.h \
	engine/tp/mirror.c engine/tp/worker.c
libengine_a_CPPFLAGS += $(IBVERBS_CFLAGS)
libengine_a_SOURCES += engine/tp/nccl.h
# the nccl transport: CUDA builds whose toolkit has nccl.h only (configure's HAVE_NCCL)
if HAVE_NCCL
libengine_a_SOURCES += engine/tp/nccl.c
libengine_a_CPPFLAGS += $(CUDA_CPPFLAGS)
endif
EXTRA_DIST += engine/tp/nccl.c bench/bench_tp_nccl.c tests/gpu/nranks.sh
# Benchmark (not a test; `make bench/bench_tp_nccl`, NCCL builds only; tests/gpu/nranks.sh runs
# it, one process per GPU): the rank order of every gather and the latency of one row's.
if HAVE_NCCL
EXTRA_PROGRAMS += bench/bench_tp_nccl
bench_bench_tp_nccl_SOURCES = bench/bench_tp_nccl.c
bench_bench_tp_nccl_LDADD = $(glmchat_LDADD)
endif
glmchat_LDADD += $(IBVERBS_LIBS)

# Two real processes on loopback: tp_peer acts as either rank, tp_hostile attacks a worker.
check_PROGRAMS += tests/tp/tp_peer tests/tp/tp_hostile
tests_tp_tp_peer_SOURCES = tests/tp/tp_peer.c
tests_tp_tp_peer_CPPFLAGS = $(TEST_CPPFLAGS)
tests_tp_tp_peer_LDADD = $(glmchat_LDADD)
tests_tp_tp_hostile_SOURCES = tests/tp/tp_hostile.c
tests_tp_tp_hostile_CPPFLAGS = $(TEST_CPPFLAGS)
tests_tp_tp_hostile_LDADD = $(glmchat_LDADD)
TESTS += tests/e2e/tp_loopback.sh tests/e2e/tp_late_peer.sh
EXTRA_DIST += tests/e2e/tp_loopback.sh tests/e2e/tp_late_peer.sh

# Check suites: the protocol, the tcp transport over a socket pair, rdma's hardware-free logic.
check_PROGRAMS += tests/unit/test_tp_protocol tests/unit/test_tp_transport tests/unit/test_tp_rdma
tests_unit_test_tp_protocol_SOURCES = tests/unit/test_tp_protocol.c
tests_unit_test_tp_protocol_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_tp_protocol_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
tests_unit_test_tp_transport_SOURCES = tests/unit/test_tp_transport.c
tests_unit_test_tp_transport_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_tp_transport_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
tests_unit_test_tp_rdma_SOURCES = tests/unit/test_tp_rdma.c
tests_unit_test_tp_rdma_CPPFLAGS = $(TEST_CPPFLAGS) $(IBVERBS_CFLAGS)
tests_unit_test_tp_rdma_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_tp_protocol tests/unit/test_tp_transport tests/unit/test_tp_rdma
# SHA-256 and HMAC-SHA256 against FIPS 180 and RFC 4231 vectors; key files; the handshake proofs.
check_PROGRAMS += tests/unit/test_tp_auth
tests_unit_test_tp_auth_SOURCES = tests/unit/test_tp_auth.c
tests_unit_test_tp_auth_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_tp_auth_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_tp_auth

# Benchmark (not a test; `make bench/bench_tp`): one 16 KiB all-gather over TCP loopback and its share of a decode step.
EXTRA_PROGRAMS += bench/bench_tp
bench_bench_tp_SOURCES = bench/bench_tp.c
bench_bench_tp_LDADD = $(glmchat_LDADD)

# Fuzz target, built by hand with clang (see its header).
EXTRA_DIST += tests/fuzz/fuzz_tp_protocol.c
TESTS += tests/e2e/tp_netem.sh
EXTRA_DIST += tests/e2e/tp_netem.sh
TESTS += tests/e2e/tp_worker_cli.sh
# --transport nccl refused where it cannot run (no CUDA, no nccl.h, the cpu backend)
TESTS += tests/e2e/tp_nccl_cli.sh
EXTRA_DIST += tests/e2e/tp_nccl_cli.sh
# nccl's bootstrap between two tp_peer processes: the id crosses unchanged, refusals named
TESTS += tests/e2e/tp_nccl_bootstrap.sh
EXTRA_DIST += tests/e2e/tp_nccl_bootstrap.sh
EXTRA_DIST += tests/e2e/tp_worker_cli.sh engine/tp/SPARKS.md
check_PROGRAMS += tests/unit/test_tp_split
tests_unit_test_tp_split_SOURCES = tests/unit/test_tp_split.c
tests_unit_test_tp_split_CPPFLAGS = $(TEST_CPPFLAGS)
tests_unit_test_tp_split_LDADD = $(glmchat_LDADD) $(CHECK_LIBS)
TESTS += tests/unit/test_tp_split
# The split forward over two real processes: logits, a chat reply, a worker killed mid-reply.
TESTS += tests/e2e/tp_split.sh tests/e2e/tp_ranks.sh
EXTRA_DIST += tests/e2e/tp_split.sh tests/e2e/tp_lib.sh tests/e2e/tp_ranks.sh
# An EXL3 model split over two real processes: logits and a greedy reply against one rank.
TESTS += tests/e2e/tp_exl3.sh
EXTRA_DIST += tests/e2e/tp_exl3.sh
# Several conversation states of one head over one worker.
check_PROGRAMS += tests/tp/tp_sessions
tests_tp_tp_sessions_SOURCES = tests/tp/tp_sessions.c
tests_tp_tp_sessions_CPPFLAGS = $(TEST_CPPFLAGS)
tests_tp_tp_sessions_LDADD = $(glmchat_LDADD)
TESTS += tests/e2e/tp_sessions.sh
EXTRA_DIST += tests/e2e/tp_sessions.sh tests/gpu/two_ranks.sh
# A head outliving its worker: restarted between turns (scripted) and mid-reply (the TUI in tmux).
TESTS += tests/e2e/tp_reconnect.sh
EXTRA_DIST += tests/e2e/tp_reconnect.sh
# A real worker made late: "waiting" in the jsonl stream and the TUI's status line, the same reply
# once it catches up, Esc while waiting.
TESTS += tests/e2e/tp_late_worker.sh
EXTRA_DIST += tests/e2e/tp_late_worker.sh
# The worker's key and port: key files, no key off loopback, wrong keys and a replayed handshake
# refused, idle connections not delaying a head, a scripted head going on after a worker failure.
TESTS += tests/e2e/tp_worker_key.sh
EXTRA_DIST += tests/e2e/tp_worker_key.sh
