# rlbench: `make demo` runs the main job, `make test` runs the tests; both set up .venv first when
# it is missing.
VENV        ?= .venv
PYTHON      ?= python3
TORCH_SPEC  ?= torch==2.13.0
DS_SPEC     ?= deepspeed==0.19.8
DS_PREBUILD ?= 1
VLLM_EXTRA  ?= auto
STAMP       := $(VENV)/.rlbench-setup
BIN         := $(VENV)/bin

export TORCH_SPEC DS_SPEC DS_PREBUILD VENV PYTHON VLLM_EXTRA

.PHONY: setup demo test test-fast clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/rlbench models verify
	$(BIN)/rlbench baseline arith-grpo
	$(BIN)/rlbench run "agents=[null,reference]" task=arith-grpo seed=0 robustness.seeds=3 "robustness.agents=[reference]" robustness.scale=false

test: $(STAMP)
	$(BIN)/python -m pytest

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

clean-venv:
	rm -rf $(VENV)
