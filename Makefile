# Thin wrapper: every target bootstraps (idempotent, seconds when ready) and builds first.
.PHONY: all bootstrap build serve test test-unit bench asan gpu-check format clean

JOBS ?= $(shell nproc)

# ccache hits across checkouts (CI builds a fresh clone in another folder): paths are hashed
# relative to the checkout, and the working directory is not hashed into debug-info builds.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

all: build

bootstrap:
	scripts/bootstrap --no-build

build: bootstrap
	@test -f build/CMakeCache.txt || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build -j$(JOBS)

# The main job: serve the default model with the OpenAI-compatible API on
# http://127.0.0.1:8080 until Ctrl-C (SERVE_ARGS adds flags, e.g. --port 8081).
SERVE_ARGS ?=
serve: build
	./build/pier serve $(SERVE_ARGS)

# Every test, through ctest.
test: build
	ctest --test-dir build --output-on-failure -j$(JOBS)

test-unit: build
	ctest --test-dir build --output-on-failure -j$(JOBS) -L unit

# Unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer (CI runs this too).
asan: bootstrap
	@test -f build-asan/CMakeCache.txt || cmake -S . -B build-asan -G Ninja \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPIER_SANITIZE=ON -DPIER_UNIT_TESTS_ONLY=ON -DPIER_CUDA=OFF
	cmake --build build-asan -j$(JOBS)
	ctest --test-dir build-asan --output-on-failure -j$(JOBS) -L unit

bench: build
	cmake --build build -j$(JOBS) --target pier_benchmarks
	scripts/run-benchmarks

gpu-check:
	scripts/gpu-check

format:
	git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf build build-asan build-gpu
