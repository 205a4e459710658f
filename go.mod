module github.com/agentbot/agentbot

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/coder/websocket v1.8.15 // indirect
	github.com/docker/docker v28.5.2+incompatible // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/openai/openai-go/v3 v3.98.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/tidwall/gjson v1.20.0 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.1 // indirect
	github.com/tidwall/sjson v1.2.5 // indirect
	go.temporal.io/sdk v1.51.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	gocloud.dev v0.47.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
