# tidepool: the two commands a new user needs.
#   make demo    build, then replay a real training trace through tidepool on the simulated device
#   make check   build, then run the test suite (about 5 minutes on 2 cores, the build included; make check-long: the long sweeps)
# Other targets: make build, make check-long (the long sweeps), make docs-figures (README's figures
# from the commands), make check-sanitize (ASan+UBSan, every assertion on), make check-tsan
# (ThreadSanitizer), make check-valgrind (memcheck), make fuzz (libFuzzer, FUZZ_SECONDS), make coverage (lines the tests
# run, per file), make check-speed (the hot path's instructions within bench/callgrind_budget.txt),
# make lint (cppcheck), make gpu-check, make install (PREFIX, default /usr/local), make clean.
# docs/reliability.md has the longer runs.

BUILD ?= build
SANITIZE_BUILD ?= build-sanitize
FUZZ_BUILD ?= build-fuzz
TSAN_BUILD ?= build-tsan
VALGRIND_BUILD ?= build-valgrind
COVERAGE_BUILD ?= build-coverage
THREAD_OPS ?= 20000
FUZZ_SECONDS ?= 60
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
PREFIX ?= /usr/local
MAKEFLAGS += --no-print-directory

.PHONY: all build demo docs-figures check check-long check-speed check-sanitize check-tsan check-valgrind fuzz coverage lint gpu-check install deps clean

all: build

# Installs the compiler and CMake if this machine lacks them (Debian; needs root or sudo).
deps:
	@command -v cmake >/dev/null && command -v cc >/dev/null && command -v gzip >/dev/null \
	  && command -v pkg-config >/dev/null \
	  || scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DTIDE_WERROR=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The demo builds only what it runs (the library and the command): output in seconds on a fresh clone.
demo: deps
	@cmake -S . -B $(BUILD) -DTIDE_WERROR=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target tidepool_cli
	$(BUILD)/tidepool replay traces/seed_transformer.csv.gz

# README.md's figures and pictures that tidepool's commands give (scripts/docs_figures.py), written
# again: after a change of the allocator's policy, the test docs_figures_current says to run this.
docs-figures: deps
	@cmake -S . -B $(BUILD) -DTIDE_WERROR=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target tidepool_cli
	python3 scripts/docs_figures.py --tool $(BUILD)/tidepool

# ctest's summary names the skipped tests; skip_reasons.sh adds why (each prints "skipped: WHY").
# The tests labelled long (the full fault sweep, the recorded loops thousands of steps long) are
# make check-long's; CI runs both.
check: build
	@status=0; ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -LE long || status=$$?; \
	scripts/skip_reasons.sh $(BUILD); exit $$status

check-long: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -L long

# The hot path's length, counted by callgrind (does not move with machine noise) on every shipped trace
# and on the one-thread micro patterns: fails if any takes more instructions than
# bench/callgrind_budget.txt allows.
check-speed: build
	@command -v valgrind >/dev/null || scripts/install-deps.sh valgrind
	@status=0; \
	bench/callgrind_replay.sh --budget bench/callgrind_budget.txt $(BUILD) || status=1; \
	bench/callgrind_micro.sh --budget bench/callgrind_budget.txt $(BUILD) || status=1; \
	exit $$status

# tidepool.h, the libraries, the command, tidepool.pc and the CMake package, under PREFIX.
# Builds only what it installs (the libraries and the command), not the tests.
install: deps
	@cmake -S . -B $(BUILD) -DTIDE_WERROR=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target tidepool_shared tidepool_static tidepool_cli
	cmake --install $(BUILD) --prefix $(PREFIX)

# The GPU tests (CUDA backend, cross-stream safety, PyTorch, CuPy); each is skipped without a GPU.
gpu-check: build
	@status=0; ctest --test-dir $(BUILD) -L gpu --output-on-failure || status=$$?; \
	scripts/skip_reasons.sh $(BUILD); exit $$status

check-sanitize: deps
	@cmake -S . -B $(SANITIZE_BUILD) -DTIDE_WERROR=ON -DTIDE_SANITIZE=ON -DTIDE_ASSERT_LEVEL=2 -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	@status=0; ctest --test-dir $(SANITIZE_BUILD) --output-on-failure -j $(JOBS) || status=$$?; \
	scripts/skip_reasons.sh $(SANITIZE_BUILD); exit $$status

# The threaded tests under ThreadSanitizer; THREAD_OPS operations per thread in the stress test
# (125000: a million allocations and a million frees over 8 threads).
check-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -DTIDE_WERROR=ON -DTIDE_TSAN=ON >/dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target test_threads test_random test_safety test_lifecycle test_expandable test_history test_teardown \
	  test_pool_threads test_pool_threads_widened test_fork test_history_stacks test_vulkan
	TIDE_THREAD_OPS=$(THREAD_OPS) TSAN_OPTIONS=halt_on_error=1 ctest --test-dir $(TSAN_BUILD) \
	  --output-on-failure -R '^(test_threads|test_threads_expandable|test_random|test_safety|test_lifecycle|test_expandable|test_history|test_teardown|test_pool_threads|test_pool_threads_widened|test_fork|test_history_stacks|vulkan_references)$$'

# Which lines of src/ the CPU tests run, per file (gcov); COVERAGE_LINES=1 lists those they do not.
coverage: deps
	scripts/coverage.sh $(COVERAGE_BUILD) $(if $(COVERAGE_LINES),--lines)

# Every CPU test inside valgrind memcheck: no errors, no leaks.
check-valgrind: deps
	@command -v valgrind >/dev/null || scripts/install-deps.sh valgrind
	@cmake -S . -B $(VALGRIND_BUILD) -DTIDE_WERROR=ON -DTIDE_VALGRIND=ON >/dev/null
	@cmake --build $(VALGRIND_BUILD) -j $(JOBS)
	ctest --test-dir $(VALGRIND_BUILD) --output-on-failure -j $(JOBS) -LE gpu

# cppcheck's warnings (bugs it can prove, not style) over the library, the tools, the tests, the fuzzing
# harness and the benchmarks; any finding fails. A false positive is silenced where it stands, with a comment saying why
# (// cppcheck-suppress ID).
lint:
	@command -v cppcheck >/dev/null || scripts/install-deps.sh lint
	cppcheck --enable=warning,performance,portability --std=c11 --inline-suppr --quiet --error-exitcode=1 \
	  -Iinclude -Isrc -Itools -Ibench src tools tests fuzz bench/*.c bench/*.h bench/*.cpp

# The libFuzzer harness (fuzz/fuzz_api.c) with ASan, UBSan and every assertion (src/assertions.h):
# first every input that once failed (fuzz/regressions), then FUZZ_SECONDS of fuzzing from the
# committed corpus. New inputs go to $(FUZZ_BUILD)/corpus; a failing one is written to
# $(FUZZ_BUILD)/crash-*.
fuzz:
	@command -v clang >/dev/null && command -v cmake >/dev/null \
	  && ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 \
	  || scripts/install-deps.sh fuzz
	@CC=clang cmake -S . -B $(FUZZ_BUILD) -DTIDE_WERROR=ON -DTIDE_FUZZ=ON -DTIDE_SANITIZE=ON -DTIDE_ASSERT_LEVEL=2 >/dev/null
	@cmake --build $(FUZZ_BUILD) --target fuzz_api -j $(JOBS)
	$(FUZZ_BUILD)/fuzz/fuzz_api fuzz/regressions/*
	@mkdir -p $(FUZZ_BUILD)/corpus
	$(FUZZ_BUILD)/fuzz/fuzz_api -max_total_time=$(FUZZ_SECONDS) -max_len=512 -timeout=30 \
	  -artifact_prefix=$(FUZZ_BUILD)/ $(FUZZ_BUILD)/corpus fuzz/corpus

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD) $(FUZZ_BUILD) $(TSAN_BUILD) $(VALGRIND_BUILD) $(COVERAGE_BUILD)
