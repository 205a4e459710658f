# The two commands of the README.
.PHONY: run test

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
