# tidepool: the two commands a new user needs.
#   make demo    build, then replay a real training trace through tidepool on the simulated device
#   make check   build, then run the whole test suite
# Other targets: make build, make check-sanitize (ASan+UBSan), make gpu-check, make clean.

BUILD ?= build
SANITIZE_BUILD ?= build-sanitize
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
MAKEFLAGS += --no-print-directory

.PHONY: all build demo check check-sanitize gpu-check deps clean

all: build

# Installs the compiler and CMake if this machine lacks them (Debian; needs root or sudo).
deps:
	@command -v cmake >/dev/null && command -v cc >/dev/null && command -v gzip >/dev/null \
	  || scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DTIDE_WERROR=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/tidepool replay traces/seed_transformer.csv.gz

check: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The GPU tests (CUDA backend, cross-stream safety, PyTorch, CuPy); each is skipped without a GPU.
gpu-check: build
	ctest --test-dir $(BUILD) -L gpu --output-on-failure

check-sanitize: deps
	@cmake -S . -B $(SANITIZE_BUILD) -DTIDE_WERROR=ON -DTIDE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
	@cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	ctest --test-dir $(SANITIZE_BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) $(SANITIZE_BUILD)
