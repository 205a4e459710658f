{{/*
Names, labels and the settings that several templates derive from values.
*/}}

{{- define "agentbot.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
agentbot.fullname is the prefix of every object's name. It is short
enough that "-worker" still fits in 63 characters.
*/}}
{{- define "agentbot.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 56 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 56 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 56 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "agentbot.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
agentbot.labels: the labels of every object.
*/}}
{{- define "agentbot.labels" -}}
helm.sh/chart: {{ include "agentbot.chart" . }}
app.kubernetes.io/name: {{ include "agentbot.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: agentbot
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
agentbot.componentLabels: the labels of a component's objects.
Call with (dict "root" $ "component" "bot").
*/}}
{{- define "agentbot.componentLabels" -}}
{{ include "agentbot.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
agentbot.selectorLabels: the labels that select a component's pods; they
never change over the release's life (a Deployment's selector is immutable).
Call with (dict "root" $ "component" "bot").
*/}}
{{- define "agentbot.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentbot.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
agentbot.image: repository:tag, or repository@digest. The tag defaults
to the chart's appVersion. Call with (dict "root" $ "image" .Values.bot.image).
*/}}
{{- define "agentbot.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) }}
{{- end }}
{{- end }}

{{- define "agentbot.serviceAccountName" -}}
{{- $sa := index .root.Values .component "serviceAccount" }}
{{- if $sa.create }}
{{- default (printf "%s-%s" (include "agentbot.fullname" .root) .component) $sa.name }}
{{- else }}
{{- default "default" $sa.name }}
{{- end }}
{{- end }}

{{/*
agentbot.secretName: the Secret of tokens and keys, the chart's or yours.
*/}}
{{- define "agentbot.secretName" -}}
{{- default (include "agentbot.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{/*
agentbot.platformEnabled: "true" when a chat platform is on, the bot's
condition of existence.
*/}}
{{- define "agentbot.platformEnabled" -}}
{{- if or .Values.slack.enabled .Values.discord.enabled }}true{{ end }}
{{- end }}

{{/*
agentbot.backends: the enabled sandbox backends, comma-separated, in the
order of preference for the default.
*/}}
{{- define "agentbot.backends" -}}
{{- $b := list }}
{{- if ne .Values.docker.mode "none" }}{{ $b = append $b "docker" }}{{ end }}
{{- if .Values.e2b.enabled }}{{ $b = append $b "e2b" }}{{ end }}
{{- if .Values.daytona.enabled }}{{ $b = append $b "daytona" }}{{ end }}
{{- join "," $b }}
{{- end }}

{{/*
agentbot.defaultBackend: sandboxes.defaultBackend, else the first enabled
backend.
*/}}
{{- define "agentbot.defaultBackend" -}}
{{- $backends := include "agentbot.backends" . }}
{{- if .Values.sandboxes.defaultBackend }}
{{- .Values.sandboxes.defaultBackend }}
{{- else if $backends }}
{{- first (splitList "," $backends) }}
{{- end }}
{{- end }}

{{/*
agentbot.blobIsFile: "true" when the blob store is a directory of the
worker (file://, or empty, which means file://<state dir>/blobs).
*/}}
{{- define "agentbot.blobIsFile" -}}
{{- if or (not .Values.blobStore.url) (hasPrefix "file://" .Values.blobStore.url) }}true{{ end }}
{{- end }}

{{/*
agentbot.secretRef renders one env entry read from the Secret.
Call with (dict "root" $ "var" "SLACK_BOT_TOKEN" "key" "slackBotToken" "optional" false).
*/}}
{{- define "agentbot.secretRef" -}}
- name: {{ .var }}
  valueFrom:
    secretKeyRef:
      name: {{ include "agentbot.secretName" .root }}
      key: {{ index .root.Values.secrets.keys .key | quote }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end }}

{{/*
agentbot.commonEnv: the non-secret variables both processes read.
Rendered as ConfigMap data (KEY: "value" lines).
*/}}
{{- define "agentbot.commonEnv" -}}
{{- $v := .Values }}
AGENTBOT_HTTP_ADDR: {{ printf ":%d" (int $v.httpPort) | quote }}
AGENTBOT_STATE_DIR: "/var/lib/agentbot"
AGENTBOT_LOG_LEVEL: {{ $v.logLevel | quote }}
{{- if $v.metrics.enabled }}
AGENTBOT_METRICS_ADDR: {{ printf ":%d" (int $v.httpPort) | quote }}
{{- end }}
AGENTBOT_LOG_FORMAT: {{ $v.logFormat | quote }}
TEMPORAL_ADDRESS: {{ $v.temporal.address | quote }}
TEMPORAL_NAMESPACE: {{ $v.temporal.namespace | quote }}
{{- if or $v.temporal.tls.enabled $v.temporal.apiKey.enabled }}
TEMPORAL_TLS: "true"
{{- end }}
{{- with $v.temporal.tls.serverName }}
TEMPORAL_TLS_SERVER_NAME: {{ . | quote }}
{{- end }}
{{- if $v.temporal.tls.secretName }}
{{- if $v.temporal.tls.caKey }}
TEMPORAL_TLS_SERVER_CA_CERT_PATH: "/etc/agentbot/temporal-tls/ca.crt"
{{- end }}
{{- if $v.temporal.tls.certKey }}
TEMPORAL_TLS_CLIENT_CERT_PATH: "/etc/agentbot/temporal-tls/tls.crt"
TEMPORAL_TLS_CLIENT_KEY_PATH: "/etc/agentbot/temporal-tls/tls.key"
{{- end }}
{{- end }}
{{- with include "agentbot.backends" . }}
AGENTBOT_BACKENDS: {{ . | quote }}
{{- end }}
{{- with include "agentbot.defaultBackend" . }}
AGENTBOT_DEFAULT_BACKEND: {{ . | quote }}
{{- end }}
{{- if and $v.slack.enabled $v.slack.apiURL }}
AGENTBOT_SLACK_API_URL: {{ $v.slack.apiURL | quote }}
{{- end }}
{{- if $v.discord.enabled }}
DISCORD_APP_ID: {{ $v.discord.appID | quote }}
{{- end }}
{{- with $v.proxy.httpsProxy }}
HTTPS_PROXY: {{ . | quote }}
{{- end }}
{{- with $v.proxy.httpProxy }}
HTTP_PROXY: {{ . | quote }}
{{- end }}
{{- with $v.proxy.noProxy }}
NO_PROXY: {{ . | quote }}
{{- end }}
{{- if $v.trustedCA.configMapName }}
SSL_CERT_FILE: "/etc/agentbot/ca/ca-certificates.crt"
{{- end }}
{{- with $v.access.admins }}
AGENTBOT_ADMINS: {{ join "," . | quote }}
{{- end }}
{{- with $v.policy.backends }}
AGENTBOT_POLICY_BACKENDS: {{ join "," . | quote }}
{{- end }}
{{- with $v.policy.models }}
AGENTBOT_MODELS: {{ join "," . | quote }}
{{- end }}
{{- with $v.policy.approvals }}
AGENTBOT_APPROVALS: {{ . | quote }}
{{- end }}
{{- with $v.policy.approvalChannels }}
{{- $items := list }}
{{- range $ch, $mode := . }}{{ $items = append $items (printf "%s=%s" $ch $mode) }}{{ end }}
AGENTBOT_APPROVAL_CHANNELS: {{ join "," $items | quote }}
{{- end }}
{{- with $v.policy.approvalTimeout }}
AGENTBOT_APPROVAL_TIMEOUT: {{ . | quote }}
{{- end }}
{{- if $v.policy.approvalTwoPerson }}
AGENTBOT_APPROVAL_TWO_PERSON: "on"
{{- end }}
{{- with $v.policy.approvalRulesOff }}
AGENTBOT_APPROVAL_RULES_OFF: {{ join "," . | quote }}
{{- end }}
{{- with $v.policy.approvalPatterns }}
{{- $items := list }}
{{- range . }}{{ $items = append $items (printf "%s=%s%s" .name .command (ternary (printf ":%s" .args) "" (not (empty .args)))) }}{{ end }}
AGENTBOT_APPROVAL_PATTERNS: {{ join "," $items | quote }}
{{- end }}
{{- range $key, $env := dict "maxSessions" "AGENTBOT_MAX_SESSIONS" "maxSessionsPerUser" "AGENTBOT_MAX_SESSIONS_PER_USER" "maxRunningTurns" "AGENTBOT_MAX_RUNNING_TURNS" "sessionTokens" "AGENTBOT_SESSION_TOKENS" "userTokensPerDay" "AGENTBOT_USER_TOKENS_PER_DAY" }}
{{- with index $v.policy $key }}
{{ $env }}: {{ . | int64 | toString | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
agentbot.botEnv: the bot's non-secret variables.
*/}}
{{- define "agentbot.botEnv" -}}
{{- $v := .Values }}
{{- include "agentbot.commonEnv" . }}
{{- with $v.temporal.uiURL }}
AGENTBOT_TEMPORAL_UI_URL: {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" $v.session.maxSteps) }}
AGENTBOT_MAX_STEPS: {{ $v.session.maxSteps | toString | quote }}
{{- end }}
{{- with $v.session.idleTimeout }}
AGENTBOT_IDLE_TIMEOUT: {{ . | quote }}
{{- end }}
{{- with $v.session.toolTimeout }}
AGENTBOT_TOOL_TIMEOUT: {{ . | quote }}
{{- end }}
{{- if $v.discord.enabled }}
{{- with $v.discord.publicKey }}
DISCORD_PUBLIC_KEY: {{ . | quote }}
{{- end }}
{{- with $v.discord.guildID }}
DISCORD_GUILD_ID: {{ . | quote }}
{{- end }}
AGENTBOT_DISCORD_THREADS: {{ $v.discord.threads | toString | quote }}
{{- end }}
{{- with $v.access.allowedUsers }}
AGENTBOT_ALLOWED_USERS: {{ join "," . | quote }}
{{- end }}
{{- with $v.access.allowedChannels }}
AGENTBOT_ALLOWED_CHANNELS: {{ join "," . | quote }}
{{- end }}
{{- with $v.access.allowedRoles }}
AGENTBOT_ALLOWED_ROLES: {{ join "," . | quote }}
{{- end }}
{{- if $v.access.allowEveryone }}
AGENTBOT_ALLOW_EVERYONE: "true"
{{- end }}
{{- end }}

{{/*
agentbot.workerEnv: the worker's non-secret variables.
*/}}
{{- define "agentbot.workerEnv" -}}
{{- $v := .Values }}
{{- include "agentbot.commonEnv" . }}
AGENTBOT_DRAIN_TIMEOUT: {{ printf "%ds" (int $v.worker.drainTimeoutSeconds) | quote }}
AGENTBOT_WORKFLOW_CACHE: {{ int $v.worker.workflowCache | quote }}
{{- with $v.payloadEncryption.codecOrigins }}
AGENTBOT_CODEC_ORIGINS: {{ join "," . | quote }}
{{- end }}
{{- with $v.blobStore.url }}
AGENTBOT_BLOB_URL: {{ . | quote }}
{{- end }}
{{- with $v.model.baseURL }}
OPENAI_BASE_URL: {{ . | quote }}
{{- end }}
{{- with $v.model.name }}
AGENTBOT_MODEL: {{ . | quote }}
{{- end }}
{{- with $v.model.api }}
AGENTBOT_MODEL_API: {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" $v.model.contextChars) }}
AGENTBOT_CONTEXT_CHARS: {{ $v.model.contextChars | toString | quote }}
{{- end }}
{{- with $v.model.timeout }}
AGENTBOT_MODEL_TIMEOUT: {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" $v.model.streamAnswers) }}
AGENTBOT_STREAM_ANSWERS: {{ $v.model.streamAnswers | toString | quote }}
{{- end }}
{{- with $v.reaper.interval }}
AGENTBOT_REAP_INTERVAL: {{ . | quote }}
{{- end }}
{{- with $v.reaper.grace }}
AGENTBOT_REAP_GRACE: {{ . | quote }}
{{- end }}
{{- with $v.reaper.retention }}
AGENTBOT_RETENTION: {{ . | quote }}
{{- end }}
{{- if ne $v.docker.mode "none" }}
{{- with $v.docker.image }}
AGENTBOT_DOCKER_IMAGE: {{ . | quote }}
{{- end }}
{{- with $v.docker.network }}
AGENTBOT_DOCKER_NETWORK: {{ . | quote }}
{{- end }}
{{- if not (kindIs "invalid" $v.docker.memoryMB) }}
AGENTBOT_DOCKER_MEMORY_MB: {{ $v.docker.memoryMB | toString | quote }}
{{- end }}
{{- if not (kindIs "invalid" $v.docker.diskGB) }}
AGENTBOT_DOCKER_DISK_GB: {{ $v.docker.diskGB | toString | quote }}
{{- end }}
{{- if not (kindIs "invalid" $v.docker.cpus) }}
AGENTBOT_DOCKER_CPUS: {{ $v.docker.cpus | toString | quote }}
{{- end }}
{{- if not (kindIs "invalid" $v.docker.pids) }}
AGENTBOT_DOCKER_PIDS: {{ $v.docker.pids | toString | quote }}
{{- end }}
{{- end }}
{{- if eq $v.docker.mode "remote" }}
DOCKER_HOST: {{ $v.docker.remote.host | quote }}
DOCKER_TLS_VERIFY: "1"
DOCKER_CERT_PATH: "/etc/agentbot/docker-tls"
{{- else if eq $v.docker.mode "dind" }}
DOCKER_HOST: "tcp://127.0.0.1:2376"
DOCKER_TLS_VERIFY: "1"
DOCKER_CERT_PATH: "/etc/agentbot/dind-certs/client"
{{- end }}
{{- if $v.e2b.enabled }}
{{- with $v.e2b.domain }}
E2B_DOMAIN: {{ . | quote }}
{{- end }}
{{- with $v.e2b.template }}
AGENTBOT_E2B_TEMPLATE: {{ . | quote }}
{{- end }}
{{- end }}
{{- if $v.daytona.enabled }}
{{- with $v.daytona.apiURL }}
DAYTONA_API_URL: {{ . | quote }}
{{- end }}
{{- with $v.daytona.snapshot }}
AGENTBOT_DAYTONA_SNAPSHOT: {{ . | quote }}
{{- end }}
{{- end }}
{{- if $v.blobStore.gcs.credentialsSecret }}
GOOGLE_APPLICATION_CREDENTIALS: "/etc/agentbot/gcp/credentials.json"
{{- end }}
{{- end }}

{{/*
agentbot.botSecretEnv: the bot's secret variables, each from the Secret.
*/}}
{{- define "agentbot.botSecretEnv" -}}
{{- $v := .Values }}
{{- if $v.temporal.apiKey.enabled }}
{{ include "agentbot.secretRef" (dict "root" . "var" "TEMPORAL_API_KEY" "key" "temporalAPIKey") }}
{{- end }}
{{- if $v.slack.enabled }}
{{ include "agentbot.secretRef" (dict "root" . "var" "SLACK_BOT_TOKEN" "key" "slackBotToken") }}
{{- if eq $v.slack.mode "socket" }}
{{ include "agentbot.secretRef" (dict "root" . "var" "SLACK_APP_TOKEN" "key" "slackAppToken") }}
{{- else }}
{{ include "agentbot.secretRef" (dict "root" . "var" "SLACK_SIGNING_SECRET" "key" "slackSigningSecret") }}
{{- end }}
{{- end }}
{{- if $v.discord.enabled }}
{{ include "agentbot.secretRef" (dict "root" . "var" "DISCORD_TOKEN" "key" "discordToken") }}
{{- end }}
{{- if $v.redis.enabled }}
{{ include "agentbot.secretRef" (dict "root" . "var" "REDIS_URL" "key" "redisURL") }}
{{- end }}
{{- if $v.payloadEncryption.enabled }}
{{ include "agentbot.secretRef" (dict "root" . "var" "AGENTBOT_PAYLOAD_KEYS" "key" "payloadKeys") }}
{{- end }}
{{- end }}

{{/*
agentbot.workerSecretEnv: the worker's secret variables, each from the
Secret. The worker delivers chat messages, so it has the platforms' bot
tokens, and nothing it would need only to receive (Slack's app token or
signing secret: config.ValidateGateway asks for those in the bot only).
*/}}
{{- define "agentbot.workerSecretEnv" -}}
{{- $v := .Values }}
{{- if or $v.secrets.existingSecret $v.secrets.openaiAPIKey }}
{{ include "agentbot.secretRef" (dict "root" . "var" "OPENAI_API_KEY" "key" "openaiAPIKey" "optional" (not (empty $v.secrets.existingSecret))) }}
{{- end }}
{{- if $v.temporal.apiKey.enabled }}
{{ include "agentbot.secretRef" (dict "root" . "var" "TEMPORAL_API_KEY" "key" "temporalAPIKey") }}
{{- end }}
{{- if $v.slack.enabled }}
{{ include "agentbot.secretRef" (dict "root" . "var" "SLACK_BOT_TOKEN" "key" "slackBotToken") }}
{{- end }}
{{- if $v.discord.enabled }}
{{ include "agentbot.secretRef" (dict "root" . "var" "DISCORD_TOKEN" "key" "discordToken") }}
{{- end }}
{{- if $v.e2b.enabled }}
{{ include "agentbot.secretRef" (dict "root" . "var" "E2B_API_KEY" "key" "e2bAPIKey") }}
{{- end }}
{{- if $v.daytona.enabled }}
{{ include "agentbot.secretRef" (dict "root" . "var" "DAYTONA_API_KEY" "key" "daytonaAPIKey") }}
{{- end }}
{{- if $v.blobStore.s3.staticCredentials }}
{{ include "agentbot.secretRef" (dict "root" . "var" "AWS_ACCESS_KEY_ID" "key" "awsAccessKeyID") }}
{{ include "agentbot.secretRef" (dict "root" . "var" "AWS_SECRET_ACCESS_KEY" "key" "awsSecretAccessKey") }}
{{- end }}
{{- if $v.payloadEncryption.enabled }}
{{ include "agentbot.secretRef" (dict "root" . "var" "AGENTBOT_PAYLOAD_KEYS" "key" "payloadKeys") }}
{{- end }}
{{- end }}

{{/*
agentbot.podSecurityContext: the pods' securityContext.
*/}}
{{- define "agentbot.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.fsGroup }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
agentbot.containerSecurityContext: the bot's and the worker's
securityContext.
*/}}
{{- define "agentbot.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
agentbot.probes: liveness and readiness probes on the http port.
Call with the component's values.
*/}}
{{- define "agentbot.probes" -}}
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  {{- toYaml .livenessProbe | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: http
  {{- toYaml .readinessProbe | nindent 2 }}
{{- end }}

{{/*
agentbot.topologySpread: the component's topologySpreadConstraints with
the labelSelector of its pods. Call with (dict "root" $ "component" "bot").
*/}}
{{- define "agentbot.topologySpread" -}}
{{- $c := index .root.Values .component }}
{{- range $c.topologySpreadConstraints }}
- labelSelector:
    matchLabels:
      {{- include "agentbot.selectorLabels" (dict "root" $.root "component" $.component) | nindent 6 }}
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
agentbot.validate fails the render on settings that cannot work, saying
what to set. Included by NOTES.txt and the worker Deployment.
*/}}
{{- define "agentbot.validate" -}}
{{- $v := .Values }}
{{- $s := $v.secrets }}
{{- $chartSecret := not $s.existingSecret }}
{{- if $s.existingSecret }}
{{- range $k := list "openaiAPIKey" "temporalAPIKey" "slackBotToken" "slackAppToken" "slackSigningSecret" "discordToken" "e2bAPIKey" "daytonaAPIKey" "redisURL" "awsAccessKeyID" "awsSecretAccessKey" "payloadKeys" }}
{{- if index $s $k }}
{{- fail (printf "secrets.%s is set, and so is secrets.existingSecret: put the value in the Secret %q (key %q), or drop existingSecret" $k $s.existingSecret (index $s.keys $k)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $need := dict }}
{{- if $v.temporal.apiKey.enabled }}{{ $_ := set $need "temporalAPIKey" "temporal.apiKey.enabled" }}{{ end }}
{{- if $v.slack.enabled }}
{{- $_ := set $need "slackBotToken" "slack.enabled" }}
{{- if eq $v.slack.mode "socket" }}{{ $_ := set $need "slackAppToken" "slack.mode=socket" }}{{ else }}{{ $_ := set $need "slackSigningSecret" "slack.mode=http" }}{{ end }}
{{- end }}
{{- if $v.discord.enabled }}{{ $_ := set $need "discordToken" "discord.enabled" }}{{ end }}
{{- if $v.e2b.enabled }}{{ $_ := set $need "e2bAPIKey" "e2b.enabled" }}{{ end }}
{{- if $v.daytona.enabled }}{{ $_ := set $need "daytonaAPIKey" "daytona.enabled" }}{{ end }}
{{- if $v.redis.enabled }}{{ $_ := set $need "redisURL" "redis.enabled" }}{{ end }}
{{- if $v.payloadEncryption.enabled }}{{ $_ := set $need "payloadKeys" "payloadEncryption.enabled" }}{{ end }}
{{- if $v.blobStore.s3.staticCredentials }}
{{- $_ := set $need "awsAccessKeyID" "blobStore.s3.staticCredentials" }}
{{- $_ := set $need "awsSecretAccessKey" "blobStore.s3.staticCredentials" }}
{{- end }}
{{- if $chartSecret }}
{{- $missing := list }}
{{- range $k := keys $need | sortAlpha }}
{{- if not (index $s $k) }}
{{- $missing = append $missing (printf "%s needs secrets.%s (or secrets.existingSecret with the key %q)" (index $need $k) $k (index $s.keys $k)) }}
{{- end }}
{{- end }}
{{- with $missing }}
{{- fail (join "; " .) }}
{{- end }}
{{- end }}
{{- if and $v.redis.enabled $s.redisURL (not (regexMatch "^rediss?://" $s.redisURL)) }}
{{- fail "secrets.redisURL must start with redis:// or rediss://" }}
{{- end }}
{{- if and $v.discord.enabled (not $v.discord.appID) }}
{{- fail "discord.enabled needs discord.appID (the application ID)" }}
{{- end }}
{{- if include "agentbot.platformEnabled" . }}
{{- $a := $v.access }}
{{- if not (or $a.allowEveryone $a.allowedUsers $a.allowedChannels $a.allowedRoles) }}
{{- fail "serving Slack or Discord needs an allowlist, or everyone there could run commands in the sandboxes: set access.allowedUsers, access.allowedChannels or access.allowedRoles, or access.allowEveryone=true" }}
{{- end }}
{{- end }}
{{- if and $v.temporal.tls.secretName (or (and $v.temporal.tls.certKey (not $v.temporal.tls.keyKey)) (and $v.temporal.tls.keyKey (not $v.temporal.tls.certKey))) }}
{{- fail "temporal.tls.certKey and temporal.tls.keyKey go together: set both (mTLS) or neither" }}
{{- end }}
{{- if and $v.temporal.tls.secretName (not $v.temporal.tls.caKey) (not $v.temporal.tls.certKey) }}
{{- fail "temporal.tls.secretName is set but names no file: set temporal.tls.caKey, or certKey and keyKey" }}
{{- end }}
{{- if and $v.temporal.tls.secretName (not $v.temporal.tls.enabled) (not $v.temporal.apiKey.enabled) }}
{{- fail "temporal.tls.secretName is set but temporal.tls.enabled is false: set temporal.tls.enabled=true" }}
{{- end }}
{{- $backends := include "agentbot.backends" . }}
{{- if and $v.sandboxes.defaultBackend (not (has $v.sandboxes.defaultBackend (splitList "," $backends))) }}
{{- fail (printf "sandboxes.defaultBackend=%s is not enabled (enabled: %s): configure it (docker.mode, e2b.enabled, daytona.enabled) or pick another" $v.sandboxes.defaultBackend (default "none" $backends)) }}
{{- end }}
{{- if eq $v.docker.mode "remote" }}
{{- if not (regexMatch "^tcp://[^/]+:[0-9]+$" $v.docker.remote.host) }}
{{- fail "docker.mode=remote needs docker.remote.host, tcp://<host>:<port> (usually 2376)" }}
{{- end }}
{{- if not $v.docker.remote.tlsSecret }}
{{- fail "docker.mode=remote needs docker.remote.tlsSecret: a Secret with the engine's CA and a client certificate and key (an engine's API without TLS is root on its host for anyone who reaches it)" }}
{{- end }}
{{- end }}
{{- $oneWorker := and (not $v.worker.autoscaling.enabled) (eq (int $v.worker.replicas) 1) }}
{{- if and (eq $v.docker.mode "dind") (not $oneWorker) }}
{{- fail "docker.mode=dind gives each worker pod its own Docker engine, but any worker may run any session's next step, so with more than one worker a session's sandbox is missing on the others: set worker.replicas=1 and worker.autoscaling.enabled=false, or use docker.mode=remote (one engine shared by all workers)" }}
{{- end }}
{{- if and (eq $v.docker.mode "dind") (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "docker.mode=dind runs the engine as a native sidecar, which needs Kubernetes 1.29 or later (this is %s)" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- if include "agentbot.blobIsFile" . }}
{{- if not $oneWorker }}
{{- fail "a file:// blob store (blobStore.url empty or file://...) is a directory of one worker pod; with more than one worker, sessions lose their snapshots: use s3:// or gs://, or set worker.replicas=1 and worker.autoscaling.enabled=false" }}
{{- end }}
{{- if and $v.blobStore.url (not (hasPrefix "file:///var/lib/agentbot/" $v.blobStore.url)) }}
{{- fail "a file:// blob store must be under file:///var/lib/agentbot/ (the state dir, the worker's only writable place that persistence keeps)" }}
{{- end }}
{{- end }}
{{- if and $v.ingress.enabled (include "agentbot.platformEnabled" .) (not (include "agentbot.ingressPaths" .)) }}
{{- fail "ingress.enabled, but nothing to route: Slack's Socket Mode and the Discord gateway need no public URL (slack.mode=http or discord.publicKey do)" }}
{{- end }}
{{- end }}

{{/*
agentbot.ingressPaths: the bot's public path prefixes, space-separated.
*/}}
{{- define "agentbot.ingressPaths" -}}
{{- $p := list }}
{{- if and .Values.slack.enabled (eq .Values.slack.mode "http") }}{{ $p = append $p "/slack/" }}{{ end }}
{{- if and .Values.discord.enabled .Values.discord.publicKey }}{{ $p = append $p "/discord/" }}{{ end }}
{{- join " " $p }}
{{- end }}

{{/*
agentbot.commonVolumes: the volumes both pods may mount (Temporal's TLS
files, the trusted CA bundle); an empty string when neither is set.
*/}}
{{- define "agentbot.commonVolumes" -}}
{{- $t := .Values.temporal.tls }}
{{- if $t.secretName }}
- name: temporal-tls
  secret:
    secretName: {{ $t.secretName }}
    defaultMode: 0440
    items:
      {{- with $t.caKey }}
      - key: {{ . | quote }}
        path: ca.crt
      {{- end }}
      {{- if $t.certKey }}
      - key: {{ $t.certKey | quote }}
        path: tls.crt
      - key: {{ $t.keyKey | quote }}
        path: tls.key
      {{- end }}
{{- end }}
{{- with .Values.trustedCA.configMapName }}
- name: trusted-ca
  configMap:
    name: {{ . }}
    items:
      - key: {{ $.Values.trustedCA.key | quote }}
        path: ca-certificates.crt
{{- end }}
{{- end }}
