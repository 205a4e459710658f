# The commands of the README.
.PHONY: run test reliability long fuzz bench bench-quick

# run: the embedded default — a Temporal dev server, an in-process worker,
# the local sandbox and a terminal chat. Needs a model endpoint
# (OPENAI_BASE_URL, OPENAI_API_KEY), or OPENAI_BASE_URL=fake for the
# offline scripted model.
run:
	scripts/setup.sh
	PATH="$(CURDIR)/.bin:$$PATH" go run ./cmd/bot

# test: set-up, static checks and every test against real services.
test:
	scripts/test.sh

# reliability: the reliability suite (./reliability/: the real bot and
# worker binaries killed mid-work, messages racing) run long, every scenario
# 20 times; make test runs it 3 times.
reliability:
	scripts/setup.sh --test
	PATH="$(CURDIR)/.bin:$$PATH" AGENTBOT_TEMPORAL_BIN="$(CURDIR)/.bin/temporal" \
		go test -race -count=1 -v -timeout 90m ./reliability/ -runs=20

# long: agentflow's long runs at full size: TestLongSession at 600 turns
# (make test: 120) and TestManagerControlLoad at 5,000 control requests,
# 100 at once (make test: 500).
long:
	scripts/setup.sh --test
	PATH="$(CURDIR)/.bin:$$PATH" AGENTBOT_TEMPORAL_BIN="$(CURDIR)/.bin/temporal" \
		go test -race -count=1 -v -timeout 90m -run '^(TestLongSession|TestManagerControlLoad)$$' ./agentflow/ \
		-long-turns=600 -control-requests=5000

# fuzz: every fuzz target (the command grammar, the Slack and Discord
# payload parsers, chat rendering and chunking, the snapshot checker, a
# real local restore) for FUZZTIME each; make test runs them 8s each.
FUZZTIME ?= 2m
fuzz:
	scripts/fuzz.sh $(FUZZTIME)

# bench: what agentbot adds to the work it does, next to baselines in the
# same run (cmd/agentbench: a bare Temporal workflow, tar/zstd, the docker
# CLI); writes the table to docs/benchmarks.md and the scaling plot to
# docs/benchmarks.png. 10-15 minutes on two cores.
bench:
	scripts/setup.sh --test
	PATH="$(CURDIR)/.bin:$$PATH" AGENTBOT_TEMPORAL_BIN="$(CURDIR)/.bin/temporal" \
		go run ./cmd/agentbench -out docs/benchmarks.md -png docs/benchmarks.png

# bench-quick: every measure at small sizes, two runs each, the table on
# the terminal only: keeps the bench command working (CI runs it).
bench-quick:
	scripts/setup.sh --test
	PATH="$(CURDIR)/.bin:$$PATH" AGENTBOT_TEMPORAL_BIN="$(CURDIR)/.bin/temporal" \
		go run ./cmd/agentbench -quick
