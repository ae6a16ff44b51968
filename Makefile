# Thin wrapper: every target bootstraps (idempotent, seconds when ready) and builds first.
.PHONY: all bootstrap build serve test test-unit bench asan gpu-check format clean

JOBS ?= $(shell nproc)

all: build

bootstrap:
	scripts/bootstrap --no-build

build: bootstrap
	@test -f build/CMakeCache.txt || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build -j$(JOBS)

# The main job. Until `pier serve` exists (issue: HTTP server), it shows the
# default model and runs one chat turn with it on the CPU.
SERVE_PROMPT ?= Write a haiku about the sea.
serve: build
	./build/pier inspect
	./build/pier devices
	echo "$(SERVE_PROMPT)" | ./build/pier run --chat -n 128

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
