# The two commands a new user needs: `make demo` and `make test`.
BUILD      ?= build
ASAN_BUILD ?= build-asan
CMAKE_FLAGS ?=

.PHONY: all deps build test demo bench clean

all: build

deps:
	@scripts/install-deps

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)

# Everything: release build + all tests (unit, integration, bounded fuzzing), the
# unit tests and an integration smoke + the demo under ASan+UBSan, then `make demo`.
test: deps
	@scripts/test

demo: build
	@scripts/demo

bench: build
	@scripts/bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-tsan build-fuzz
