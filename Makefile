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

# reliability: issue 16's scenarios run long (./reliability/: the real bot
# and worker binaries killed, restarted, starved of Redis, Temporal or the
# model, fed bad input; each scenario RUNS times), the security tables and
# every fuzz target for FUZZTIME_RELIABILITY; writes docs/reliability.md.
# make test runs the same scenarios 3 times each.
RUNS ?= 20
FUZZTIME_RELIABILITY ?= 30s
reliability:
	scripts/reliability.sh $(RUNS) $(FUZZTIME_RELIABILITY)

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
