# The two commands of the quick start. Each installs what it needs
# (scripts/install-deps.sh), builds, then runs.
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)

.PHONY: run test bench deps build build-asan clean

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
	@cmake --build $(BUILD) -j$(JOBS) > $(BUILD).log 2>&1 || { cat $(BUILD).log; exit 1; }

build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DTF_SANITIZE=ON > /dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS) > $(ASAN_BUILD).log 2>&1 || { cat $(ASAN_BUILD).log; exit 1; }

# The main job: what tensorframe sees here, then the demo on the best device.
run: build
	@$(BUILD)/bin/tf-info
	@echo
	@$(BUILD)/bin/hello

# Every backend this machine can build; the whole suite under ASan+UBSan,
# then the whole suite (conformance on every device included) as built.
test: build build-asan
	@echo "== test suite under AddressSanitizer + UndefinedBehaviorSanitizer =="
	@cd $(ASAN_BUILD) && bash ../scripts/ctest-lsan-retry.sh
	@echo "== test suite =="
	@cd $(BUILD) && ctest --output-on-failure

# tf-bench beside OpenBLAS, STREAM-style loops and PyTorch; writes
# docs/perf.json and docs/perf.png (see docs/PERFORMANCE.md).
bench: build
	@bash scripts/install-deps.sh --bench
	@/usr/bin/python3 bench/compare.py $(BUILD) --rounds $(or $(ROUNDS),5)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(BUILD).log $(ASAN_BUILD).log
