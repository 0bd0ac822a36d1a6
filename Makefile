# The two commands a new user needs: `make demo` and `make test`.
BUILD      ?= build
ASAN_BUILD ?= build-asan
# Unity builds (batches of sources compiled as one): a cold build of the tree costs
# about half the CPU (doc/build.md). scripts/test builds the same way.
CMAKE_FLAGS ?= -DCMAKE_UNITY_BUILD=ON

.PHONY: all deps build test demo bench soak scale clean

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

# The index soak (doc/soak.md): 12M blocks of KV-event churn (lost removals, workers
# joining and leaving) into the real router; its RSS curve goes to $(BUILD)/soak/.
soak: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) --target infera-router infera-register
	@mkdir -p $(BUILD)/soak
	@/usr/bin/python3 tools/soak/index_soak.py --router $(BUILD)/apps/infera-router/infera-router \
	  --register $(BUILD)/apps/infera-register/infera-register \
	  --csv $(BUILD)/soak/index_soak.csv --check

# The fleet-scale harness (doc/perf-scale.md): 4,096 simulated targets (512 workers x 8
# DP ranks) publishing KV events into the real router; ingestion, view lag, pick
# latency, RSS per block, restart time. Its result goes to $(BUILD)/scale/.
SCALE_FLAGS ?= --workers 512 --dp 8 --view-blocks 2441 --churn-s 30
scale: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) --target infera-router infera-mock-engine scale_fleet
	@mkdir -p $(BUILD)/scale
	@uptime
	@/usr/bin/python3 bench/scale/fleet_scale.py --router $(BUILD)/apps/infera-router/infera-router \
	  --engine $(BUILD)/apps/infera-mock-engine/infera-mock-engine \
	  --fleet $(BUILD)/bench/scale/scale_fleet $(SCALE_FLAGS) \
	  --json $(BUILD)/scale/fleet_scale.json --check
	@uptime

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-tsan build-fuzz
