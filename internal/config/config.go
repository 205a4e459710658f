// Package config is agentbot's configuration: one explicit struct, loaded
// from environment variables (the caller passes them; only cmd/* reads the
// process environment) and overridden by flags in cmd/*. Unknown AGENTBOT_*
// variables are errors, and Validate says exactly what is wrong.
package config

import (
	"errors"
	"fmt"
	"github.com/agentbot/agentbot/internal/payloadcodec"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbot/agentbot/agentflow"
)

// Config is the whole configuration of the bot and the worker.
type Config struct {
	// TemporalAddress is host:port of the Temporal frontend. Empty means
	// the embedded default: cmd/bot starts a dev server.
	TemporalAddress   string
	TemporalNamespace string
	// TemporalTLS turns TLS on for the Temporal connection. It is on when
	// TEMPORAL_TLS=true, or when a certificate, a CA or an API key is
	// given; an API key over a connection without TLS is refused.
	TemporalTLS bool
	// TemporalCA is a PEM file of the CAs that sign the frontend's
	// certificate; empty means the system's roots.
	TemporalCA string
	// TemporalClientCert and TemporalClientKey are PEM files of the
	// client certificate for mTLS (both or neither).
	TemporalClientCert string
	TemporalClientKey  string
	// TemporalServerName overrides the name checked in the frontend's
	// certificate (default: the host of TemporalAddress).
	TemporalServerName string
	// TemporalAPIKey is a Temporal Cloud API key: a secret, sent as a
	// bearer token over TLS only.
	TemporalAPIKey string
	// TemporalBin is the temporal CLI for the embedded dev server; empty
	// means PATH, then the repository's .bin.
	TemporalBin string
	// TemporalUIPort is the embedded server's web UI port (0: the server's
	// port + 1000; -1: none).
	TemporalUIPort int
	// TemporalUIURL is the Temporal Web UI's base URL, for links in
	// status messages; the embedded default sets its own.
	TemporalUIURL string
	// StateDir holds local state: the embedded server's database, local
	// sandboxes, the default blob store.
	StateDir string
	// BlobURL opens the blob store (file://, mem://, s3://, gs://).
	BlobURL string

	// Model endpoint. OpenAIAPIKey is a secret: it is read by the worker
	// and never enters a workflow payload or a log.
	OpenAIBaseURL string
	OpenAIAPIKey  string
	Model         string
	ModelAPI      string // "chat" or "responses"
	ContextChars  int
	// ModelTimeout bounds one model call (the worker's); a call that has
	// not answered by then is abandoned and retried. It stays under
	// agentflow.ModelStepTimeout.
	ModelTimeout time.Duration
	// StreamAnswers shows answers while the model writes them where the
	// chat can (Slack); false posts them whole at the end of the turn.
	StreamAnswers bool

	// Sandboxes. DefaultBackend is the backend of new sessions: when
	// AGENTBOT_DEFAULT_BACKEND is unset, local, or (local being off) docker
	// if enabled, else the first enabled backend.
	DefaultBackend string
	Backends       []string // enabled backends; empty = every available one
	// UnsafeLocal turns the local backend on while serving a chat
	// platform: it gives every allowed chat user an unisolated shell on
	// this machine. Without a chat platform the local backend is on
	// anyway.
	UnsafeLocal   bool
	LocalDir      string
	DockerImage   string
	DockerNetwork string
	DockerMemory  int64
	// DockerDisk bounds a Docker sandbox's workspace, where the engine
	// supports volume quotas; 0 means none.
	DockerDisk int64
	DockerCPUs float64
	DockerPids int64
	// Cloud backends; the keys are secrets read by the worker only.
	E2BAPIKey       string
	E2BDomain       string
	E2BTemplate     string
	DaytonaAPIKey   string
	DaytonaAPIURL   string
	DaytonaSnapshot string

	// Session defaults.
	MaxSteps    int
	IdleTimeout time.Duration
	ToolTimeout time.Duration

	// The reaper (agentflow.EnsureReaper): how often it sweeps, how old a
	// sandbox must be before it may be reaped, how long an ended
	// session's blobs stay.
	ReapInterval time.Duration
	ReapGrace    time.Duration
	Retention    time.Duration
	// DrainTimeout is how long a stopping worker lets running activities
	// (a shell command, a model call) finish before it cancels them.
	DrainTimeout time.Duration

	// RedisURL, when set, caches thread lookups and de-duplicates events
	// in Redis; empty means in memory.
	RedisURL string

	// Slack. With SlackBotToken set the bot serves Slack: over Socket Mode
	// when SlackAppToken is set, else over HTTP on HTTPAddr (verified
	// with SlackSigningSecret). All three are secrets.
	SlackBotToken      string
	SlackAppToken      string
	SlackSigningSecret string
	SlackAPIURL        string
	HTTPAddr           string

	// Discord. With DiscordToken set the bot serves Discord over the
	// gateway, and interactions also over HTTP when DiscordPublicKey is
	// set. DiscordGuildID registers the /agent command in one guild.
	DiscordToken     string
	DiscordAppID     string
	DiscordPublicKey string
	DiscordGuildID   string
	DiscordThreads   bool

	// Access control (comma-separated IDs; empty lists allow everyone).
	// Serving a chat platform needs one of the three allowlists, or
	// AllowEveryone (see ValidateGateway).
	AllowedUsers    []string
	AllowedChannels []string
	AllowedRoles    []string
	Admins          []string
	AllowEveryone   bool

	// The tenants' policy as configured: each tenant's session manager
	// starts from it, and admins change keys of it with the policy verb
	// (see agentflow.TenantPolicy). Zero: no limit; empty lists: all.
	PolicyBackends     []string
	MaxSessions        int64
	MaxSessionsPerUser int64
	MaxRunningTurns    int64
	SessionTokens      int64
	UserTokensPerDay   int64
	Models             []string
	// Approvals holds the approval keys of the policy as configured, by
	// policy key (agentflow.PolicyApprovals, ...), in the form the policy
	// verb takes.
	Approvals map[string]string

	LogLevel slog.Level
	// LogFormat is "text" or "json".
	LogFormat string
	// MetricsAddr is the listen address of /metrics; empty means off. When
	// it equals HTTPAddr, /metrics is served by that server.
	MetricsAddr string
	// PprofAddr is the listen address of Go's runtime profiles
	// (/debug/pprof/); empty means off.
	PprofAddr string
	// WorkflowCache is how many sessions' workflow states a worker keeps
	// in memory between their tasks (Temporal's sticky cache); a session
	// pushed out replays its history at its next task.
	WorkflowCache int
	// PayloadKeys, when set, encrypts every payload Temporal stores
	// (internal/payloadcodec: id=base64 pairs, the first encrypts). A
	// secret.
	PayloadKeys string
	// CodecOrigins are the Temporal Web UI origins allowed to call the
	// worker's codec endpoint (/codec) from a browser.
	CodecOrigins []string
	// TraceContent lets message text and command output into span
	// attributes; off, spans carry IDs, names and counts only.
	TraceContent bool
	// Secrets collects the secret values of this configuration, to redact
	// from chat messages and logs.
	Secrets []string
}

// DefaultModelTimeout is the model call's timeout when
// AGENTBOT_MODEL_TIMEOUT is unset: under agentflow.ModelStepTimeout, with
// room for the step's own work, and long enough for a reasoning model.
const DefaultModelTimeout = 4 * time.Minute

// Var documents one environment variable.
type Var struct {
	Name, Default, Help string
}

// Vars lists every environment variable agentbot reads, for --help and the
// README.
var Vars = []Var{
	{"TEMPORAL_ADDRESS", "(empty: embedded dev server)", "Temporal frontend host:port"},
	{"TEMPORAL_NAMESPACE", "default", "Temporal namespace (Temporal Cloud: <namespace>.<account>)"},
	{"TEMPORAL_TLS", "false (true when a TLS file or an API key is set)", "true: connect to Temporal over TLS"},
	{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "(system roots)", "PEM file of the CA that signs the Temporal frontend's certificate"},
	{"TEMPORAL_TLS_CLIENT_CERT_PATH", "", "PEM file of the client certificate (mTLS, with _KEY_PATH)"},
	{"TEMPORAL_TLS_CLIENT_KEY_PATH", "", "PEM file of the client certificate's private key"},
	{"TEMPORAL_TLS_SERVER_NAME", "(host of TEMPORAL_ADDRESS)", "name to verify in the frontend's certificate"},
	{"TEMPORAL_API_KEY", "", "Temporal Cloud API key (secret), sent over TLS only"},
	{"AGENTBOT_TEMPORAL_BIN", "(PATH, then ./.bin)", "temporal CLI used for the embedded dev server"},
	{"AGENTBOT_TEMPORAL_UI_PORT", "0 (server port + 1000)", "embedded server's web UI port; -1 for none"},
	{"AGENTBOT_TEMPORAL_UI_URL", "(embedded: its own UI)", "Temporal Web UI base URL, for session links in status messages"},
	{"AGENTBOT_STATE_DIR", "$XDG_STATE_HOME/agentbot or ~/.local/state/agentbot", "local state: embedded Temporal database, local sandboxes, default blob store"},
	{"AGENTBOT_BLOB_URL", "file://<state dir>/blobs", "blob store for snapshots and transcripts (file://, mem://, s3://, gs://)"},
	{"OPENAI_BASE_URL", "https://api.openai.com/v1", "any OpenAI-compatible endpoint (Azure OpenAI, Ollama, vLLM, LiteLLM); \"fake\" runs the built-in scripted model (offline demo)"},
	{"OPENAI_API_KEY", "", "API key of the endpoint (secret: read by the worker only)"},
	{"AGENTBOT_MODEL", "gpt-4.1-mini", "model name"},
	{"AGENTBOT_MODEL_API", "chat", "chat (Chat Completions) or responses (Responses API)"},
	{"AGENTBOT_CONTEXT_CHARS", "300000", "context budget in characters; older turns are left out past it"},
	{"AGENTBOT_STREAM_ANSWERS", "true", "worker: true streams answers into the chat as the model writes them, where the platform can (Slack's chat streaming, else a message edited at most once a second); false posts each answer whole at the end of its turn"},
	{"AGENTBOT_MODEL_TIMEOUT", "4m", "worker: how long one model call may take before it is abandoned and retried (under 5m, the model step's limit)"},
	{"AGENTBOT_DEFAULT_BACKEND", "local (serving Slack or Discord: docker, else the first enabled backend)", "backend of new sessions"},
	{"AGENTBOT_BACKENDS", "(every available one)", "comma-separated backends to enable"},
	{"AGENTBOT_UNSAFE_LOCAL", "false", "true: keep the local backend on while serving Slack or Discord; it is NOT isolated: every allowed chat user gets a shell on this machine as this OS user (without a chat platform, local is on anyway)"},
	{"AGENTBOT_LOCAL_DIR", "<state dir>/sandboxes", "where local sandboxes live"},
	{"AGENTBOT_DOCKER_IMAGE", "agentbot-sandbox:latest", "image of Docker sandboxes"},
	{"AGENTBOT_DEBIAN_MIRROR", "http://deb.debian.org/debian", "Debian mirror scripts/build-sandbox-image.sh builds the sandbox image from (set-up only; the bot and worker ignore it)"},
	{"AGENTBOT_DOCKER_NETWORK", "none", "network of Docker sandboxes"},
	{"AGENTBOT_DOCKER_MEMORY_MB", "1024", "memory limit of a Docker sandbox"},
	{"AGENTBOT_DOCKER_DISK_GB", "10", "size limit of a Docker sandbox's workspace, where the engine supports volume quotas (XFS project quotas); 0 for none"},
	{"AGENTBOT_DOCKER_CPUS", "1", "CPU limit of a Docker sandbox"},
	{"AGENTBOT_DOCKER_PIDS", "512", "process limit of a Docker sandbox"},
	{"E2B_API_KEY", "", "E2B API key (secret); set to enable the e2b backend"},
	{"E2B_DOMAIN", "e2b.app", "E2B domain (API at api.<domain>)"},
	{"AGENTBOT_E2B_TEMPLATE", "base", "E2B template of new sandboxes"},
	{"DAYTONA_API_KEY", "", "Daytona API key (secret); set to enable the daytona backend"},
	{"DAYTONA_API_URL", "https://app.daytona.io/api", "Daytona API URL"},
	{"AGENTBOT_DAYTONA_SNAPSHOT", "(Daytona's default)", "Daytona snapshot of new sandboxes"},
	{"AGENTBOT_MAX_STEPS", "24", "model calls per turn"},
	{"AGENTBOT_IDLE_TIMEOUT", "30m", "idle time before a sandbox is snapshotted and stopped"},
	{"AGENTBOT_TOOL_TIMEOUT", "2m", "default time limit of a shell command"},
	{"AGENTBOT_REAP_INTERVAL", "10m", "how often the reaper destroys orphaned sandboxes and deletes expired session data"},
	{"AGENTBOT_REAP_GRACE", "10m", "sandboxes younger than this are never reaped"},
	{"AGENTBOT_RETENTION", "168h", "how long the blob store keeps what an ended session left"},
	{"AGENTBOT_DRAIN_TIMEOUT", "5m", "on SIGTERM, how long the worker lets running commands and model calls finish before it cancels them (match the pod's terminationGracePeriodSeconds)"},
	{"REDIS_URL", "(empty: in memory)", "Redis for the thread cache and event de-duplication"},
	{"SLACK_BOT_TOKEN", "", "Slack bot token (xoxb-…; secret); set to serve Slack"},
	{"SLACK_APP_TOKEN", "", "Slack app-level token (xapp-…; secret): Socket Mode, no public URL needed"},
	{"SLACK_SIGNING_SECRET", "", "Slack signing secret (secret): the HTTP Events API, when there is no app token"},
	{"AGENTBOT_SLACK_API_URL", "https://slack.com/api/", "Slack Web API base URL"},
	{"AGENTBOT_HTTP_ADDR", ":8080", "listen address of this process's HTTP endpoints: /healthz and /readyz (bot serving a chat platform, and worker), Slack events and Discord interactions (bot); \"off\" for none"},
	{"DISCORD_TOKEN", "", "Discord bot token (secret); set to serve Discord"},
	{"DISCORD_APP_ID", "", "Discord application ID"},
	{"DISCORD_PUBLIC_KEY", "", "Discord application public key (hex): interactions over HTTP at /discord/interactions"},
	{"DISCORD_GUILD_ID", "(global)", "register /agent in this guild only (instant), else globally"},
	{"AGENTBOT_DISCORD_THREADS", "false", "true: /agent new in a text channel opens a thread instead of binding the channel"},
	{"AGENTBOT_ALLOWED_USERS", "(everyone)", "comma-separated user IDs allowed to use the bot; serving Slack or Discord needs this, _CHANNELS or _ROLES (or AGENTBOT_ALLOW_EVERYONE=true)"},
	{"AGENTBOT_ALLOWED_CHANNELS", "(every channel)", "comma-separated channel IDs the bot answers in"},
	{"AGENTBOT_ALLOWED_ROLES", "(any role)", "comma-separated Discord role IDs allowed"},
	{"AGENTBOT_ALLOW_EVERYONE", "false", "true: serve Slack or Discord with no allowlist, to every member of the workspace or server"},
	{"AGENTBOT_ADMINS", "(none)", "comma-separated user IDs who may control any session, change the policy and read the audit log"},
	{"AGENTBOT_POLICY_BACKENDS", "(every backend that runs)", "policy: comma-separated backends sessions may use"},
	{"AGENTBOT_MAX_SESSIONS", "0 (no limit)", "policy: live sessions per tenant (Slack team, Discord server)"},
	{"AGENTBOT_MAX_SESSIONS_PER_USER", "0 (no limit)", "policy: live sessions one person may own in a tenant"},
	{"AGENTBOT_MAX_RUNNING_TURNS", "0 (no limit)", "policy: turns running at once in a tenant; more wait in order"},
	{"AGENTBOT_SESSION_TOKENS", "0 (no limit)", "policy: token budget of one session"},
	{"AGENTBOT_USER_TOKENS_PER_DAY", "0 (no limit)", "policy: tokens one person may use per UTC day in a tenant"},
	{"AGENTBOT_MODELS", "(the default model only)", "policy: comma-separated models a session may be set to (model verb), besides AGENTBOT_MODEL"},
	{"AGENTBOT_APPROVALS", "never", "policy: which shell commands wait for the owner's approval in the chat: never, risky (those agentflow/risk flags) or always"},
	{"AGENTBOT_APPROVAL_CHANNELS", "(none)", "policy: channels with a stricter approval mode, channel=mode,... (C0123=always)"},
	{"AGENTBOT_APPROVAL_TIMEOUT", "10m", "policy: how long a command waits for an answer before it is denied (10s to 24h)"},
	{"AGENTBOT_APPROVAL_TWO_PERSON", "off", "policy: in mode always, two different people must approve (on, off)"},
	{"AGENTBOT_APPROVAL_RULES_OFF", "(none)", "policy: built-in risk rules switched off, comma-separated (git-push,package-install)"},
	{"AGENTBOT_APPROVAL_PATTERNS", "(none)", "policy: the tenant's own risk rules, name=command-glob[:args-glob],... (tf-apply=terraform:apply*)"},
	{"AGENTBOT_LOG_LEVEL", "info", "debug, info, warn or error"},
	{"AGENTBOT_LOG_FORMAT", "text", "text or json (one JSON object a line, fixed keys; the chart's default)"},
	{"AGENTBOT_METRICS_ADDR", "(off)", "listen address of /metrics (Prometheus text format), e.g. :9090; the same as AGENTBOT_HTTP_ADDR shares that server"},
	{"AGENTBOT_PPROF_ADDR", "(off)", "listen address of Go's runtime profiles (/debug/pprof/: heap, CPU, goroutines), e.g. 127.0.0.1:6060; keep it on loopback"},
	{"AGENTBOT_WORKFLOW_CACHE", "500", "worker: sessions whose workflow state stays in memory between turns (Temporal's sticky cache); beyond it the least recently used replay their history at their next turn"},
	{"AGENTBOT_PAYLOAD_KEYS", "(off)", "secret: encrypt every payload Temporal stores (histories, memos, failures) with AES-256-GCM: comma-separated id=<base64 32 bytes> pairs, the first encrypts, all decrypt (rotation); the same on the bot and the worker"},
	{"AGENTBOT_CODEC_ORIGINS", "", "with AGENTBOT_PAYLOAD_KEYS: Temporal Web UI origins (e.g. http://localhost:8233) allowed to call the worker's codec endpoint /codec from a browser"},
	{"AGENTBOT_TRACE_CONTENT", "false", "true: message text and command output may enter trace span attributes (off: IDs, names and counts only)"},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "(empty: no traces)", "OTLP collector base URL (http://collector:4318 for http/protobuf, http://collector:4317 for grpc): traces are on when this or _TRACES_ENDPOINT is set"},
	{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "(OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces)", "OTLP traces URL, used as it is"},
	{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf", "OTLP protocol: http/protobuf or grpc (_TRACES_PROTOCOL overrides it for traces)"},
	{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "(OTEL_EXPORTER_OTLP_PROTOCOL)", "OTLP protocol of traces"},
	{"OTEL_EXPORTER_OTLP_HEADERS", "", "headers sent with every export (secret: may hold the tracing backend's token), key=value pairs separated by commas, values URL-encoded (_TRACES_HEADERS adds to them for traces)"},
	{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "", "headers sent with trace exports (secret)"},
	{"OTEL_SERVICE_NAME", "agentbot-bot or agentbot-worker", "service.name of the spans"},
	{"OTEL_RESOURCE_ATTRIBUTES", "", "resource attributes of the spans, key=value pairs separated by commas (deployment.environment=prod)"},
	{"OTEL_TRACES_SAMPLER", "parentbased_always_on", "always_on, always_off, traceidratio or their parentbased_ forms"},
	{"OTEL_TRACES_SAMPLER_ARG", "1", "the ratio of traceidratio samplers, 0 to 1"},
	{"OTEL_TRACES_EXPORTER", "otlp", "otlp, or none for no traces"},
	{"OTEL_SDK_DISABLED", "false", "true: no traces"},
}

// SecretVars are the variables that hold agentbot's secrets. cmd/* keeps
// them out of its process's environment block (internal/secretenv) and
// hands them to Load only.
var SecretVars = []string{
	"OPENAI_API_KEY", "TEMPORAL_API_KEY", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET",
	"DISCORD_TOKEN", "E2B_API_KEY", "DAYTONA_API_KEY", "AGENTBOT_PAYLOAD_KEYS",
	// A tracing backend's token travels as an OTLP header.
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
}

// SDKSecretVars are secrets that libraries read from the environment
// themselves (the AWS SDK behind s3:// blob stores): cmd/* keeps them out
// of its environment block too, and puts them back into the Go runtime's
// copy of the environment only.
var SDKSecretVars = []string{"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}

// Load reads the configuration from environ (as os.Environ returns it).
func Load(environ []string) (Config, error) {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	known := map[string]bool{}
	for _, v := range Vars {
		known[v.Name] = true
	}
	var errs []error
	for _, k := range sortedKeys(env) {
		if strings.HasPrefix(k, "AGENTBOT_") && !known[k] {
			errs = append(errs, fmt.Errorf("unknown variable %s (see --help for the list)", k))
		}
	}
	get := func(k, def string) string {
		if v, ok := env[k]; ok && v != "" {
			return v
		}
		return def
	}
	num := func(k string, def int64) int64 {
		s := get(k, "")
		if s == "" {
			return def
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not a whole number", k, s))
		}
		return n
	}
	// Switches of what is unsafe take only true or false: a typo must
	// not pass for either.
	boolean := func(k string, def ...bool) bool {
		d := "false"
		if len(def) > 0 && def[0] {
			d = "true"
		}
		switch s := get(k, d); s {
		case "true":
			return true
		case "false":
			return false
		default:
			errs = append(errs, fmt.Errorf("%s=%q: want true or false", k, s))
			return false
		}
	}
	dur := func(k string, def time.Duration) time.Duration {
		s := get(k, "")
		if s == "" {
			return def
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("%s=%q is not a positive duration like 90s or 30m", k, s))
		}
		return d
	}

	c := Config{
		TemporalAddress:    get("TEMPORAL_ADDRESS", ""),
		TemporalNamespace:  get("TEMPORAL_NAMESPACE", "default"),
		TemporalCA:         get("TEMPORAL_TLS_SERVER_CA_CERT_PATH", ""),
		TemporalClientCert: get("TEMPORAL_TLS_CLIENT_CERT_PATH", ""),
		TemporalClientKey:  get("TEMPORAL_TLS_CLIENT_KEY_PATH", ""),
		TemporalServerName: get("TEMPORAL_TLS_SERVER_NAME", ""),
		TemporalAPIKey:     get("TEMPORAL_API_KEY", ""),
		TemporalBin:        get("AGENTBOT_TEMPORAL_BIN", ""),
		TemporalUIPort:     int(num("AGENTBOT_TEMPORAL_UI_PORT", 0)),
		TemporalUIURL:      get("AGENTBOT_TEMPORAL_UI_URL", ""),
		StateDir:           get("AGENTBOT_STATE_DIR", defaultStateDir(env)),
		OpenAIBaseURL:      get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
		OpenAIAPIKey:       get("OPENAI_API_KEY", ""),
		Model:              get("AGENTBOT_MODEL", "gpt-4.1-mini"),
		ModelAPI:           get("AGENTBOT_MODEL_API", "chat"),
		ContextChars:       int(num("AGENTBOT_CONTEXT_CHARS", 300_000)),
		ModelTimeout:       dur("AGENTBOT_MODEL_TIMEOUT", DefaultModelTimeout),
		StreamAnswers:      boolean("AGENTBOT_STREAM_ANSWERS", true),
		DefaultBackend:     get("AGENTBOT_DEFAULT_BACKEND", ""),
		UnsafeLocal:        boolean("AGENTBOT_UNSAFE_LOCAL"),
		DockerImage:        get("AGENTBOT_DOCKER_IMAGE", "agentbot-sandbox:latest"),
		DockerNetwork:      get("AGENTBOT_DOCKER_NETWORK", "none"),
		DockerMemory:       num("AGENTBOT_DOCKER_MEMORY_MB", 1024) << 20,
		DockerDisk:         num("AGENTBOT_DOCKER_DISK_GB", 10) << 30,
		DockerPids:         num("AGENTBOT_DOCKER_PIDS", 512),
		E2BAPIKey:          get("E2B_API_KEY", ""),
		E2BDomain:          get("E2B_DOMAIN", ""),
		E2BTemplate:        get("AGENTBOT_E2B_TEMPLATE", ""),
		DaytonaAPIKey:      get("DAYTONA_API_KEY", ""),
		DaytonaAPIURL:      get("DAYTONA_API_URL", ""),
		DaytonaSnapshot:    get("AGENTBOT_DAYTONA_SNAPSHOT", ""),
		MaxSteps:           int(num("AGENTBOT_MAX_STEPS", 24)),
		IdleTimeout:        dur("AGENTBOT_IDLE_TIMEOUT", 30*time.Minute),
		ToolTimeout:        dur("AGENTBOT_TOOL_TIMEOUT", 2*time.Minute),
		ReapInterval:       dur("AGENTBOT_REAP_INTERVAL", 10*time.Minute),
		ReapGrace:          dur("AGENTBOT_REAP_GRACE", 10*time.Minute),
		Retention:          dur("AGENTBOT_RETENTION", 7*24*time.Hour),
		DrainTimeout:       dur("AGENTBOT_DRAIN_TIMEOUT", 5*time.Minute),
		RedisURL:           get("REDIS_URL", ""),
		SlackBotToken:      get("SLACK_BOT_TOKEN", ""),
		SlackAppToken:      get("SLACK_APP_TOKEN", ""),
		SlackSigningSecret: get("SLACK_SIGNING_SECRET", ""),
		SlackAPIURL:        get("AGENTBOT_SLACK_API_URL", ""),
		HTTPAddr:           get("AGENTBOT_HTTP_ADDR", ":8080"),
		DiscordToken:       get("DISCORD_TOKEN", ""),
		DiscordAppID:       get("DISCORD_APP_ID", ""),
		DiscordPublicKey:   get("DISCORD_PUBLIC_KEY", ""),
		DiscordGuildID:     get("DISCORD_GUILD_ID", ""),
		DiscordThreads:     get("AGENTBOT_DISCORD_THREADS", "false") == "true",
		AllowedUsers:       list(get("AGENTBOT_ALLOWED_USERS", "")),
		AllowedChannels:    list(get("AGENTBOT_ALLOWED_CHANNELS", "")),
		AllowedRoles:       list(get("AGENTBOT_ALLOWED_ROLES", "")),
		Admins:             list(get("AGENTBOT_ADMINS", "")),
		PolicyBackends:     list(get("AGENTBOT_POLICY_BACKENDS", "")),
		MaxSessions:        num("AGENTBOT_MAX_SESSIONS", 0),
		MaxSessionsPerUser: num("AGENTBOT_MAX_SESSIONS_PER_USER", 0),
		MaxRunningTurns:    num("AGENTBOT_MAX_RUNNING_TURNS", 0),
		SessionTokens:      num("AGENTBOT_SESSION_TOKENS", 0),
		UserTokensPerDay:   num("AGENTBOT_USER_TOKENS_PER_DAY", 0),
		Models:             list(get("AGENTBOT_MODELS", "")),
		Approvals:          map[string]string{},
		AllowEveryone:      boolean("AGENTBOT_ALLOW_EVERYONE"),
		LogFormat:          get("AGENTBOT_LOG_FORMAT", "text"),
		MetricsAddr:        get("AGENTBOT_METRICS_ADDR", ""),
		PprofAddr:          get("AGENTBOT_PPROF_ADDR", ""),
		PayloadKeys:        get("AGENTBOT_PAYLOAD_KEYS", ""),
		CodecOrigins:       list(get("AGENTBOT_CODEC_ORIGINS", "")),
		WorkflowCache:      int(num("AGENTBOT_WORKFLOW_CACHE", 500)),
		TraceContent:       boolean("AGENTBOT_TRACE_CONTENT"),
	}
	for env, key := range approvalVars {
		if v := get(env, ""); v != "" {
			c.Approvals[key] = v
		}
	}
	switch s := get("TEMPORAL_TLS", ""); s {
	case "":
		c.TemporalTLS = c.TemporalCA != "" || c.TemporalClientCert != "" || c.TemporalClientKey != "" || c.TemporalAPIKey != ""
	case "true", "false":
		c.TemporalTLS = s == "true"
	default:
		errs = append(errs, fmt.Errorf("TEMPORAL_TLS=%q: want true or false", s))
	}
	if s := get("AGENTBOT_DOCKER_CPUS", "1"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f <= 0 {
			errs = append(errs, fmt.Errorf("AGENTBOT_DOCKER_CPUS=%q is not a positive number", s))
		}
		c.DockerCPUs = f
	}
	if s := get("AGENTBOT_BACKENDS", ""); s != "" {
		for _, b := range strings.Split(s, ",") {
			if b = strings.TrimSpace(b); b != "" {
				c.Backends = append(c.Backends, b)
			}
		}
	}
	if c.DefaultBackend == "" {
		c.DefaultBackend = c.defaultBackend()
	}
	c.BlobURL = get("AGENTBOT_BLOB_URL", "file://"+filepath.Join(c.StateDir, "blobs"))
	c.LocalDir = get("AGENTBOT_LOCAL_DIR", filepath.Join(c.StateDir, "sandboxes"))
	if err := c.LogLevel.UnmarshalText([]byte(get("AGENTBOT_LOG_LEVEL", "info"))); err != nil {
		errs = append(errs, fmt.Errorf("AGENTBOT_LOG_LEVEL: %v", err))
	}
	secrets := []string{c.PayloadKeys, c.OpenAIAPIKey, c.TemporalAPIKey, c.SlackBotToken, c.SlackAppToken, c.SlackSigningSecret, c.DiscordToken, c.E2BAPIKey, c.DaytonaAPIKey}
	for _, k := range SDKSecretVars {
		secrets = append(secrets, get(k, ""))
	}
	// The values of OTLP headers (key=value pairs, URL-encoded values):
	// internal/telemetry parses them from environ and hands them to the
	// exporter.
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		for _, pair := range strings.Split(get(k, ""), ",") {
			if _, v, ok := strings.Cut(pair, "="); ok {
				if dv, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
					secrets = append(secrets, dv)
				}
			}
		}
	}
	for _, sec := range secrets {
		if sec != "" {
			c.Secrets = append(c.Secrets, sec)
		}
	}
	errs = append(errs, c.Validate())
	return c, errors.Join(errs...)
}

// Validate checks the values and says what is wrong with each.
func (c Config) Validate() error {
	var errs []error
	if !filepath.IsAbs(c.StateDir) {
		errs = append(errs, fmt.Errorf("state dir %q must be an absolute path", c.StateDir))
	}
	if c.ModelAPI != "chat" && c.ModelAPI != "responses" {
		errs = append(errs, fmt.Errorf("model API %q: want chat or responses", c.ModelAPI))
	}
	if c.OpenAIBaseURL != "fake" {
		if u, err := url.Parse(c.OpenAIBaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("OPENAI_BASE_URL %q is not an http(s) URL", c.OpenAIBaseURL))
		}
	}
	for _, env := range slices.Sorted(maps.Keys(approvalVars)) {
		key := approvalVars[env]
		if v, ok := c.Approvals[key]; ok {
			var p agentflow.TenantPolicy
			if err := p.Set(key, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", env, err))
			}
		}
	}
	if c.Model == "" {
		errs = append(errs, errors.New("model name is empty"))
	}
	for k, n := range map[string]int64{"AGENTBOT_MAX_SESSIONS": c.MaxSessions, "AGENTBOT_MAX_SESSIONS_PER_USER": c.MaxSessionsPerUser,
		"AGENTBOT_MAX_RUNNING_TURNS": c.MaxRunningTurns, "AGENTBOT_SESSION_TOKENS": c.SessionTokens, "AGENTBOT_USER_TOKENS_PER_DAY": c.UserTokensPerDay} {
		if n < 0 || (n > 1<<30 && k != "AGENTBOT_SESSION_TOKENS" && k != "AGENTBOT_USER_TOKENS_PER_DAY") {
			errs = append(errs, fmt.Errorf("%s=%d: want 0 (no limit) or a positive number", k, n))
		}
	}
	if c.MaxSteps < 1 || c.MaxSteps > 200 {
		errs = append(errs, fmt.Errorf("max steps %d: want 1 to 200", c.MaxSteps))
	}
	if c.ContextChars < 10_000 {
		errs = append(errs, fmt.Errorf("context budget %d characters is too small (at least 10000)", c.ContextChars))
	}
	if c.ModelTimeout >= agentflow.ModelStepTimeout {
		errs = append(errs, fmt.Errorf("AGENTBOT_MODEL_TIMEOUT %s: want less than %s, the limit of a model step", c.ModelTimeout, agentflow.ModelStepTimeout))
	}
	if c.TemporalAddress == "" && (c.TemporalTLS || c.TemporalAPIKey != "") {
		errs = append(errs, errors.New("TEMPORAL_TLS, a TEMPORAL_TLS_* file or TEMPORAL_API_KEY is set but TEMPORAL_ADDRESS is not (the embedded dev server needs neither)"))
	}
	if c.TemporalAPIKey != "" && !c.TemporalTLS {
		errs = append(errs, errors.New("TEMPORAL_API_KEY is set with TEMPORAL_TLS=false: the key would cross the network in clear text"))
	}
	if (c.TemporalClientCert == "") != (c.TemporalClientKey == "") {
		errs = append(errs, errors.New("TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH go together: set both or neither"))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("AGENTBOT_LOG_FORMAT %q: want text or json", c.LogFormat))
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("AGENTBOT_METRICS_ADDR %q: want host:port or :port", c.MetricsAddr))
		}
	}
	if c.PayloadKeys != "" {
		if _, err := payloadcodec.Parse(c.PayloadKeys); err != nil {
			errs = append(errs, err)
		}
	}
	if c.PprofAddr != "" {
		if _, _, err := net.SplitHostPort(c.PprofAddr); err != nil {
			errs = append(errs, fmt.Errorf("AGENTBOT_PPROF_ADDR %q: want host:port or :port", c.PprofAddr))
		}
	}
	if c.WorkflowCache < 1 {
		errs = append(errs, fmt.Errorf("AGENTBOT_WORKFLOW_CACHE %d: want at least 1", c.WorkflowCache))
	}
	if c.HTTPAddr != "off" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			errs = append(errs, fmt.Errorf("AGENTBOT_HTTP_ADDR %q: want host:port, :port or off", c.HTTPAddr))
		}
	}
	localOff := c.ChatPlatform() && !c.UnsafeLocal
	switch {
	case localOff && slices.Contains(c.Backends, localBackend):
		errs = append(errs, fmt.Errorf("AGENTBOT_BACKENDS lists local, but the local backend is off while serving %s: %s; "+
			"take local out of AGENTBOT_BACKENDS, or set AGENTBOT_UNSAFE_LOCAL=true to accept that", c.platforms(), localDanger))
	case localOff && c.DefaultBackend == localBackend:
		errs = append(errs, fmt.Errorf("AGENTBOT_DEFAULT_BACKEND=local, but the local backend is off while serving %s: %s; "+
			"set AGENTBOT_DEFAULT_BACKEND to docker, e2b or daytona, or AGENTBOT_UNSAFE_LOCAL=true to accept that", c.platforms(), localDanger))
	case len(c.Backends) > 0 && !slices.Contains(c.Backends, c.DefaultBackend):
		errs = append(errs, fmt.Errorf("default backend %q is not among the enabled backends %v", c.DefaultBackend, c.Backends))
	}
	if c.RedisURL != "" {
		if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			errs = append(errs, fmt.Errorf("REDIS_URL %q: want redis:// or rediss://", c.RedisURL))
		}
	}
	return errors.Join(errs...)
}

// localBackend and dockerBackend are the registry names of those backends.
const (
	localBackend  = "local"
	dockerBackend = "docker"
)

// localDanger says why the local backend is off in chat.
const localDanger = "it is NOT isolated and would give every allowed chat user a shell on this machine as this OS user"

// Enabled reports whether backend name may be registered: it is among
// Backends (or Backends is empty), and it is not the local backend while
// serving a chat platform without UnsafeLocal.
func (c Config) Enabled(name string) bool {
	if name == localBackend && c.ChatPlatform() && !c.UnsafeLocal {
		return false
	}
	return len(c.Backends) == 0 || slices.Contains(c.Backends, name)
}

// ChatPlatform reports whether a chat platform (Slack or Discord) is
// configured: the bot serves it, the worker delivers to it.
func (c Config) ChatPlatform() bool {
	return c.SlackBotToken != "" || c.DiscordToken != ""
}

// platforms names the configured chat platforms, for messages.
func (c Config) platforms() string {
	switch {
	case c.SlackBotToken != "" && c.DiscordToken != "":
		return "Slack and Discord"
	case c.DiscordToken != "":
		return "Discord"
	}
	return "Slack"
}

// defaultBackend is the backend of new sessions when none is configured:
// local when it is on, else docker when enabled, else the first enabled
// backend; empty when none is left (Validate says why).
func (c Config) defaultBackend() string {
	switch {
	case c.Enabled(localBackend):
		return localBackend
	case c.Enabled(dockerBackend):
		return dockerBackend
	}
	for _, b := range c.Backends {
		if c.Enabled(b) {
			return b
		}
	}
	return ""
}

// ValidateGateway checks what serving chat platforms needs beyond Validate:
// a way to receive (a Slack app token or signing secret, a Discord app ID),
// an allowlist (users, channels or roles; admins alone are none), or
// AllowEveryone. cmd/bot calls it before it serves Slack or Discord; the
// worker does not, as it answers no one.
func (c Config) ValidateGateway() error {
	// What only receiving needs is checked here: the worker delivers
	// with the bot tokens alone.
	var errs []error
	if c.SlackBotToken != "" && c.SlackAppToken == "" && c.SlackSigningSecret == "" {
		errs = append(errs, errors.New("SLACK_BOT_TOKEN is set but neither SLACK_APP_TOKEN (Socket Mode) nor SLACK_SIGNING_SECRET (HTTP events) is"))
	}
	if c.DiscordToken != "" && c.DiscordAppID == "" {
		errs = append(errs, errors.New("DISCORD_TOKEN is set but DISCORD_APP_ID is not"))
	}
	if !c.ChatPlatform() || c.AllowEveryone || c.hasAllowlist() {
		return errors.Join(errs...)
	}
	return errors.Join(append(errs, fmt.Errorf("serving %s with no allowlist would let everyone there use the bot and run commands in its sandboxes: "+
		"set AGENTBOT_ALLOWED_USERS, AGENTBOT_ALLOWED_CHANNELS or AGENTBOT_ALLOWED_ROLES (comma-separated IDs), "+
		"or AGENTBOT_ALLOW_EVERYONE=true to allow everyone", c.platforms()))...)
}

func (c Config) hasAllowlist() bool {
	return len(c.AllowedUsers)+len(c.AllowedChannels)+len(c.AllowedRoles) > 0
}

// Warnings returns what a start must say loudly: the unsafe settings in
// effect. cmd/bot and cmd/worker log each at warn level.
func (c Config) Warnings() []string {
	if !c.ChatPlatform() {
		return nil
	}
	var w []string
	if c.UnsafeLocal && c.Enabled(localBackend) {
		w = append(w, "UNSAFE: AGENTBOT_UNSAFE_LOCAL=true: the local backend is on while serving "+c.platforms()+
			"; it is NOT isolated: every allowed chat user can run any command on this machine as this OS user, "+
			"with its files, network and processes")
	}
	if c.AllowEveryone && !c.hasAllowlist() {
		w = append(w, "UNSAFE: AGENTBOT_ALLOW_EVERYONE=true and no allowlist: everyone who can reach the bot on "+
			c.platforms()+" can use it")
	}
	return w
}

func list(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func defaultStateDir(env map[string]string) string {
	if d := env["XDG_STATE_HOME"]; d != "" {
		return filepath.Join(d, "agentbot")
	}
	home := env["HOME"]
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".local", "state", "agentbot")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Table renders Vars as an aligned table for --help.
func Table() string {
	var b strings.Builder
	for _, v := range Vars {
		fmt.Fprintf(&b, "  %-26s %s\n  %-26s   default: %s\n", v.Name, v.Help, "", v.Default)
	}
	return b.String()
}

// TenantPolicy is the configured policy of every tenant: the base its
// session manager starts from.
func (c Config) TenantPolicy() agentflow.TenantPolicy {
	p := agentflow.TenantPolicy{
		Admins: slices.Clone(c.Admins), Backends: slices.Clone(c.PolicyBackends),
		MaxSessions: int(c.MaxSessions), MaxSessionsPerUser: int(c.MaxSessionsPerUser), MaxRunningTurns: int(c.MaxRunningTurns),
		SessionTokens: c.SessionTokens, UserTokensPerDay: c.UserTokensPerDay, Models: slices.Clone(c.Models),
	}
	for _, key := range slices.Sorted(maps.Keys(c.Approvals)) {
		_ = p.Set(key, c.Approvals[key]) // checked by Load
	}
	return p
}

// approvalVars maps the approval variables to their policy keys.
var approvalVars = map[string]string{
	"AGENTBOT_APPROVALS":           agentflow.PolicyApprovals,
	"AGENTBOT_APPROVAL_CHANNELS":   agentflow.PolicyApprovalChannels,
	"AGENTBOT_APPROVAL_TIMEOUT":    agentflow.PolicyApprovalTimeout,
	"AGENTBOT_APPROVAL_TWO_PERSON": agentflow.PolicyApprovalTwoPerson,
	"AGENTBOT_APPROVAL_RULES_OFF":  agentflow.PolicyApprovalRulesOff,
	"AGENTBOT_APPROVAL_PATTERNS":   agentflow.PolicyApprovalPatterns,
}
