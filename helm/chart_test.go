package helm

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	slackbot "github.com/agentbot/agentbot/bot/slack"
	"github.com/agentbot/agentbot/internal/config"
)

// chartDir is the chart under test, relative to this package.
const chartDir = "agentbot"

// kubeVersion is the cluster version the tests render for. A helm built
// from source (go install, as scripts/setup.sh does) assumes Kubernetes
// v1.20 when no cluster is at hand, which the chart's kubeVersion
// (>=1.27) refuses; a release build assumes its client-go's version.
const kubeVersion = "1.31.0"

// release and namespace of every render.
const (
	releaseName = "rel"
	namespace   = "agentbot"
)

// chartCase is one values configuration the chart must render and pass.
type chartCase struct {
	name  string
	files []string // values files under testdata/
	// bot: the gateway is rendered (a chat platform is enabled).
	bot bool
	// dind: the worker pod has the privileged DinD sidecar.
	dind bool
	// existingSecret is the Secret the chart references but does not make.
	existingSecret string
	// kinds that must be among the rendered objects.
	kinds []string
	// extraVars are the extraEnv names of the values files that are not
	// agentbot's variables.
	extraVars []string
}

var cases = []chartCase{
	{
		name:  "default",
		kinds: []string{"Deployment", "ConfigMap", "ServiceAccount", "Service", "PodDisruptionBudget"},
	},
	{
		name:  "minimal",
		files: []string{"minimal-values.yaml"},
		bot:   true,
		kinds: []string{"Deployment", "ConfigMap", "Secret", "ServiceAccount", "Service", "PodDisruptionBudget"},
	},
	{
		name:           "full",
		files:          []string{"full-values.yaml"},
		bot:            true,
		existingSecret: "agentbot-managed",
		kinds: []string{"Deployment", "ConfigMap", "ServiceAccount", "Service", "PodDisruptionBudget",
			"HorizontalPodAutoscaler", "Ingress", "ServiceMonitor"},
		extraVars: []string{"POD_NAME"},
	},
	{
		name:  "full-dind",
		files: []string{"full-dind-values.yaml"},
		bot:   true,
		dind:  true,
		kinds: []string{"Deployment", "ConfigMap", "Secret", "ServiceAccount", "Service", "PodDisruptionBudget",
			"PersistentVolumeClaim", "ServiceMonitor"},
	},
}

// helmPath finds the helm CLI: PATH, then the repository's .bin. A missing
// helm fails the test: these tests never skip.
func helmPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	p, err := filepath.Abs(filepath.Join("..", ".bin", "helm"))
	if err == nil {
		if fi, serr := os.Stat(p); serr == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("HELM NOT FOUND: these tests need the helm CLI on PATH or at %s (scripts/setup.sh installs it)", p)
	return ""
}

// runHelm runs helm with args and returns its standard output, or an error
// that holds its standard error.
func runHelm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmPath(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// valuesArgs turns values files of testdata/ into -f arguments.
func valuesArgs(files []string) []string {
	var args []string
	for _, f := range files {
		args = append(args, "-f", filepath.Join("testdata", f))
	}
	return args
}

// template renders the chart with the values files and extra arguments.
func template(t *testing.T, files []string, extra ...string) (string, error) {
	t.Helper()
	args := []string{"template", releaseName, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}
	args = append(args, valuesArgs(files)...)
	return runHelm(t, append(args, extra...)...)
}

// object is one rendered manifest.
type object struct {
	apiVersion, kind, name string
	source                 string // the template it came from
	yaml                   []byte
	meta                   map[string]any // the whole object, untyped
}

// rendered is a chart render, split and indexed.
type rendered struct {
	objects     []object
	deployments map[string]*appsv1.Deployment // by component
	configMaps  map[string]*corev1.ConfigMap  // by name
	secrets     map[string]*corev1.Secret     // by name
}

var (
	renderMu    sync.Mutex
	renderCache = map[string]*rendered{}
)

// render renders a case once per test binary and decodes it.
func render(t *testing.T, c chartCase) *rendered {
	t.Helper()
	renderMu.Lock()
	defer renderMu.Unlock()
	if r, ok := renderCache[c.name]; ok {
		return r
	}
	out, err := template(t, c.files)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeAll(out)
	if err != nil {
		t.Fatal(err)
	}
	renderCache[c.name] = r
	return r
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)
var sourceLine = regexp.MustCompile(`(?m)^# Source: (.+)$`)

// splitManifests splits helm's output into its objects, skipping documents
// that hold only comments.
func splitManifests(out string) ([]object, error) {
	var objs []object
	for _, doc := range docSep.Split(out, -1) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("a rendered document is not YAML: %v\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		o := object{yaml: []byte(doc), meta: m}
		o.apiVersion, _ = m["apiVersion"].(string)
		o.kind, _ = m["kind"].(string)
		if md, ok := m["metadata"].(map[string]any); ok {
			o.name, _ = md["name"].(string)
		}
		if s := sourceLine.FindStringSubmatch(doc); s != nil {
			o.source = s[1]
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// strictDecode decodes one manifest into into, refusing unknown and
// duplicate fields.
func strictDecode(doc []byte, into any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the object")
	}
	return nil
}

// typedFor returns an empty object of the Kubernetes type of
// apiVersion/kind, or nil for a kind the chart must not render.
func typedFor(apiVersion, kind string) any {
	switch apiVersion + " " + kind {
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}
	case "v1 Service":
		return &corev1.Service{}
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}
	case "v1 Secret":
		return &corev1.Secret{}
	case "v1 ServiceAccount":
		return &corev1.ServiceAccount{}
	case "v1 PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "networking.k8s.io/v1 Ingress":
		return &networkingv1.Ingress{}
	}
	return nil
}

// decodeAll splits a render and decodes every object strictly. A kind
// without a type here (other than the ServiceMonitor CRD) is an error.
func decodeAll(out string) (*rendered, error) {
	objs, err := splitManifests(out)
	if err != nil {
		return nil, err
	}
	r := &rendered{
		objects:     objs,
		deployments: map[string]*appsv1.Deployment{},
		configMaps:  map[string]*corev1.ConfigMap{},
		secrets:     map[string]*corev1.Secret{},
	}
	var errs []error
	for _, o := range objs {
		if o.apiVersion == "monitoring.coreos.com/v1" && o.kind == "ServiceMonitor" {
			continue // a CRD: checked untyped by TestServiceMonitor
		}
		typed := typedFor(o.apiVersion, o.kind)
		if typed == nil {
			errs = append(errs, fmt.Errorf("%s: unexpected kind %s %s", o.source, o.apiVersion, o.kind))
			continue
		}
		if err := strictDecode(o.yaml, typed); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s %s does not decode strictly: %w", o.source, o.kind, o.name, err))
			continue
		}
		switch v := typed.(type) {
		case *appsv1.Deployment:
			r.deployments[v.Labels["app.kubernetes.io/component"]] = v
		case *corev1.ConfigMap:
			r.configMaps[v.Name] = v
		case *corev1.Secret:
			r.secrets[v.Name] = v
		}
	}
	return r, errors.Join(errs...)
}

func TestLint(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", "--kube-version", kubeVersion, chartDir}, valuesArgs(c.files)...)
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint: %s", out)
			}
		})
	}
}

func TestRenderDecodesStrictly(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := render(t, c)
			have := map[string]int{}
			for _, o := range r.objects {
				have[o.kind]++
			}
			for _, k := range c.kinds {
				if have[k] == 0 {
					t.Errorf("no %s rendered (have %v)", k, have)
				}
			}
			wantDeploys := []string{"worker"}
			if c.bot {
				wantDeploys = []string{"bot", "worker"}
			}
			var got []string
			for comp := range r.deployments {
				got = append(got, comp)
			}
			slices.Sort(got)
			if !slices.Equal(got, wantDeploys) {
				t.Errorf("Deployments of components %v, want %v", got, wantDeploys)
			}
			if c.existingSecret != "" && len(r.secrets) > 0 {
				t.Errorf("with secrets.existingSecret the chart made a Secret")
			}
		})
	}
}

// The strict decode must be able to fail: a field no type has.
func TestStrictDecodeRefusesUnknownFields(t *testing.T) {
	doc := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata: {}\ndatta: {}\n"
	if _, err := decodeAll(doc); err == nil || !strings.Contains(err.Error(), "datta") {
		t.Fatalf("a ConfigMap with an unknown field decoded: %v", err)
	}
	if _, err := decodeAll("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n"); err == nil {
		t.Fatal("an unexpected kind was accepted")
	}
}

func TestLabels(t *testing.T) {
	chart, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(chart, &meta); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, o := range render(t, c).objects {
				md, _ := o.meta["metadata"].(map[string]any)
				labels, _ := md["labels"].(map[string]any)
				for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
					"app.kubernetes.io/part-of", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
					if labels[k] == nil || labels[k] == "" {
						t.Errorf("%s %s: no label %s", o.kind, o.name, k)
					}
				}
				if labels["app.kubernetes.io/version"] != meta.AppVersion || labels["helm.sh/chart"] != "agentbot-"+meta.Version {
					t.Errorf("%s %s: version labels %v, %v", o.kind, o.name, labels["app.kubernetes.io/version"], labels["helm.sh/chart"])
				}
				if labels["app.kubernetes.io/instance"] != releaseName || labels["app.kubernetes.io/managed-by"] != "Helm" {
					t.Errorf("%s %s: instance/managed-by labels %v", o.kind, o.name, labels)
				}
				if o.kind != "Secret" && o.kind != "ServiceMonitor" && labels["app.kubernetes.io/component"] == nil {
					t.Errorf("%s %s: no app.kubernetes.io/component label", o.kind, o.name)
				}
			}
			// Images default to the chart's appVersion.
			if c.name == "default" || c.name == "minimal" {
				for comp, d := range render(t, c).deployments {
					img := d.Spec.Template.Spec.Containers[0].Image
					if want := "ghcr.io/agentbot/agentbot-" + comp + ":" + meta.AppVersion; img != want {
						t.Errorf("%s image %s, want %s", comp, img, want)
					}
				}
			}
		})
	}
}

func TestServiceMonitor(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := render(t, c)
			for _, o := range r.objects {
				if o.kind != "ServiceMonitor" {
					continue
				}
				var sm map[string]any
				if err := strictDecode(o.yaml, &sm); err != nil {
					t.Fatal(err)
				}
				if sm["apiVersion"] != "monitoring.coreos.com/v1" {
					t.Errorf("apiVersion %v", sm["apiVersion"])
				}
				spec, _ := sm["spec"].(map[string]any)
				eps, _ := spec["endpoints"].([]any)
				if len(eps) != 1 {
					t.Fatalf("endpoints %v", spec["endpoints"])
				}
				ep := eps[0].(map[string]any)
				if ep["port"] != "http" || ep["path"] != "/metrics" || ep["interval"] == nil || ep["scrapeTimeout"] == nil {
					t.Errorf("endpoint %v", ep)
				}
				sel, _ := spec["selector"].(map[string]any)
				ml, _ := sel["matchLabels"].(map[string]any)
				if ml["app.kubernetes.io/instance"] != releaseName || ml["app.kubernetes.io/name"] == nil {
					t.Errorf("selector %v", sel)
				}
				// Every Service it selects has the port it scrapes.
				for _, s := range r.objects {
					if s.kind != "Service" {
						continue
					}
					var svc corev1.Service
					if err := strictDecode(s.yaml, &svc); err != nil {
						t.Fatal(err)
					}
					if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "http" }) {
						t.Errorf("Service %s has no port named http", svc.Name)
					}
				}
			}
		})
	}
}

func TestSchemaRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		file, want string
	}{
		{"bad-type.yaml", "replicas"},
		{"bad-key.yaml", "replicaz"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			_, err := template(t, []string{tc.file})
			if err == nil {
				t.Fatalf("helm template -f %s succeeded", tc.file)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the error does not name %q: %v", tc.want, err)
			}
		})
	}
}

// Settings that cannot work fail the render with a sentence saying what to
// set.
func TestRenderRefusesBrokenSettings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		args  []string
		want  string
	}{
		{"platform without allowlist", nil,
			[]string{"--set", "slack.enabled=true", "--set", "secrets.slackBotToken=x", "--set", "secrets.slackAppToken=y"},
			"needs an allowlist"},
		{"slack without token", nil,
			[]string{"--set", "slack.enabled=true", "--set", "access.allowEveryone=true"},
			"secrets.slackBotToken"},
		{"value and existingSecret", []string{"full-values.yaml"},
			[]string{"--set", "secrets.openaiAPIKey=sk-x"},
			"secrets.openaiAPIKey is set, and so is secrets.existingSecret"},
		{"dind with two workers", []string{"full-dind-values.yaml"},
			[]string{"--set", "worker.replicas=2", "--set", "blobStore.url=s3://b"},
			"worker.replicas=1"},
		{"dind with autoscaling", []string{"full-dind-values.yaml"},
			[]string{"--set", "worker.autoscaling.enabled=true", "--set", "blobStore.url=s3://b"},
			"docker.mode=dind"},
		{"dind before native sidecars", []string{"full-dind-values.yaml"},
			[]string{"--kube-version", "1.28.0"},
			"1.29"},
		{"file blobs with two workers", []string{"minimal-values.yaml"},
			[]string{"--set", "blobStore.url=file:///var/lib/agentbot/blobs"},
			"file:// blob store"},
		{"file blobs outside the state dir", nil,
			[]string{"--set", "blobStore.url=file:///data/blobs"},
			"file:///var/lib/agentbot/"},
		{"remote docker without TLS", nil,
			[]string{"--set", "docker.mode=remote", "--set", "docker.remote.host=tcp://d:2376"},
			"docker.remote.tlsSecret"},
		{"default backend not enabled", nil,
			[]string{"--set", "sandboxes.defaultBackend=e2b"},
			"sandboxes.defaultBackend=e2b"},
		{"discord without app ID", nil,
			[]string{"--set", "discord.enabled=true", "--set", "secrets.discordToken=x", "--set", "access.allowEveryone=true"},
			"discord.appID"},
		{"temporal TLS secret with no file", nil,
			[]string{"--set", "temporal.tls.enabled=true", "--set", "temporal.tls.secretName=s", "--set", "temporal.tls.caKey=",
				"--set", "temporal.tls.certKey=", "--set", "temporal.tls.keyKey="},
			"names no file"},
		{"client certificate without key", nil,
			[]string{"--set", "temporal.tls.enabled=true", "--set", "temporal.tls.secretName=s", "--set", "temporal.tls.keyKey="},
			"certKey and temporal.tls.keyKey go together"},
		{"ingress with nothing to route", []string{"minimal-values.yaml"},
			[]string{"--set", "ingress.enabled=true"},
			"nothing to route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := template(t, tc.files, tc.args...)
			if err == nil {
				t.Fatal("the render succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the error does not say %q: %v", tc.want, err)
			}
		})
	}
}

// Every object of values.schema.json that has fixed properties refuses
// others; free-form maps (labels, annotations, node selectors) constrain
// their values to strings. "global" is Helm's, passed by parent charts.
func TestSchemaIsClosed(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, n any)
	walk = func(path string, n any) {
		switch v := n.(type) {
		case map[string]any:
			if v["type"] == "object" && path != "/properties/global" {
				switch ap := v["additionalProperties"].(type) {
				case bool:
					if ap {
						t.Errorf("%s: additionalProperties true", path)
					}
					if _, ok := v["properties"].(map[string]any); !ok {
						t.Errorf("%s: a closed object without properties", path)
					}
				case map[string]any:
					if ap["type"] != "string" {
						t.Errorf("%s: a map whose values are not strings", path)
					}
				default:
					t.Errorf("%s: an object without additionalProperties", path)
				}
			}
			for k, c := range v {
				walk(path+"/"+k, c)
			}
		case []any:
			for i, c := range v {
				walk(fmt.Sprintf("%s/%d", path, i), c)
			}
		}
	}
	walk("", schema)
}

// isDind reports whether c is the opt-in DinD sidecar.
func isDind(c corev1.Container) bool { return c.Name == "dind" }

func TestPodSecurity(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for comp, d := range render(t, c).deployments {
				spec := d.Spec.Template.Spec
				psc := spec.SecurityContext
				if psc == nil {
					t.Fatalf("%s: no pod securityContext", comp)
				}
				if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
					// Service links inject <SERVICE>_* variables, and a
					// Service named agentbot-* gives AGENTBOT_* ones that
					// config.Load refuses.
					t.Errorf("%s: enableServiceLinks is not false", comp)
				}
				if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
					t.Errorf("%s: the service account token is mounted", comp)
				}
				if psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("%s: pod seccompProfile %v", comp, psc.SeccompProfile)
				}
				privileged := false
				all := slices.Concat(spec.InitContainers, spec.Containers)
				for _, ctr := range all {
					sc := ctr.SecurityContext
					if sc == nil {
						t.Errorf("%s/%s: no securityContext", comp, ctr.Name)
						continue
					}
					// Nothing runs as root, the sidecar included.
					nonRoot := psc.RunAsNonRoot
					if sc.RunAsNonRoot != nil {
						nonRoot = sc.RunAsNonRoot
					}
					uid := psc.RunAsUser
					if sc.RunAsUser != nil {
						uid = sc.RunAsUser
					}
					if nonRoot == nil || !*nonRoot {
						t.Errorf("%s/%s: runAsNonRoot is not true", comp, ctr.Name)
					}
					if uid == nil || *uid == 0 {
						t.Errorf("%s/%s: runAsUser %v", comp, ctr.Name, uid)
					}
					if isDind(ctr) {
						if !c.dind {
							t.Errorf("%s: a dind container without docker.mode=dind", comp)
						}
						if sc.Privileged != nil && *sc.Privileged {
							privileged = true
						}
						if ctr.RestartPolicy == nil || *ctr.RestartPolicy != corev1.ContainerRestartPolicyAlways || ctr.StartupProbe == nil {
							t.Errorf("%s/dind: not a native sidecar with a startup probe", comp)
						}
						continue
					}
					if sc.Privileged != nil && *sc.Privileged {
						t.Errorf("%s/%s: privileged", comp, ctr.Name)
					}
					if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
						t.Errorf("%s/%s: readOnlyRootFilesystem is not true", comp, ctr.Name)
					}
					if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
						t.Errorf("%s/%s: allowPrivilegeEscalation is not false", comp, ctr.Name)
					}
					if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
						t.Errorf("%s/%s: capabilities %v, want drop ALL", comp, ctr.Name, sc.Capabilities)
					}
					if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
						t.Errorf("%s/%s: seccompProfile %v", comp, ctr.Name, sc.SeccompProfile)
					}
				}
				// The privileged sidecar is flagged on the pod.
				flag := d.Spec.Template.Annotations["agentbot.dev/privileged-container"]
				if privileged != (flag == "dind") {
					t.Errorf("%s: privileged container %v, annotation agentbot.dev/privileged-container=%q", comp, privileged, flag)
				}
				if c.dind && comp == "worker" && !privileged {
					t.Errorf("worker: docker.mode=dind without the (privileged) sidecar")
				}

				if len(spec.Containers) != 1 {
					t.Fatalf("%s: %d containers, want 1", comp, len(spec.Containers))
				}
				main := spec.Containers[0]
				if main.Name != comp {
					t.Errorf("container %q in the %s Deployment", main.Name, comp)
				}
				for _, p := range []struct {
					name string
					pr   *corev1.Probe
					path string
				}{{"liveness", main.LivenessProbe, "/healthz"}, {"readiness", main.ReadinessProbe, "/readyz"}} {
					if p.pr == nil || p.pr.HTTPGet == nil || p.pr.HTTPGet.Path != p.path || p.pr.HTTPGet.Port.String() != "http" {
						t.Errorf("%s: %s probe %+v, want GET %s on port http", comp, p.name, p.pr, p.path)
					}
				}
				for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					if _, ok := main.Resources.Requests[r]; !ok {
						t.Errorf("%s: no %s request", comp, r)
					}
					if _, ok := main.Resources.Limits[r]; !ok {
						t.Errorf("%s: no %s limit", comp, r)
					}
				}
				// The root filesystem is read-only: /tmp and the state dir
				// are volumes.
				for _, dir := range []string{"/tmp", "/var/lib/agentbot"} {
					if !slices.ContainsFunc(main.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir && !m.ReadOnly }) {
						t.Errorf("%s: no writable volume at %s", comp, dir)
					}
				}
			}
		})
	}
}

// secretVars are the variables that hold secrets: they must come from a
// Secret, never from a ConfigMap or a literal value.
var secretVars = slices.Concat(config.SecretVars, config.SDKSecretVars, []string{"REDIS_URL", "AWS_ACCESS_KEY_ID"})

// modelOnlyVars are the worker's secrets the gateway must never hold.
var modelOnlyVars = []string{"OPENAI_API_KEY", "E2B_API_KEY", "DAYTONA_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"}

// receiveOnlyVars are the gateway's secrets the worker must never hold:
// it delivers with the bot tokens alone.
var receiveOnlyVars = []string{"SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"}

// allowedVars are the names the chart may set: agentbot's (config.Vars)
// and those of the libraries and the system the chart configures.
func allowedVars(extra []string) map[string]bool {
	ok := map[string]bool{}
	for _, v := range config.Vars {
		ok[v.Name] = true
	}
	for _, v := range []string{"DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH",
		"HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "SSL_CERT_FILE",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS"} {
		ok[v] = true
	}
	for _, v := range extra {
		ok[v] = true
	}
	return ok
}

// placeholder stands for the value of a key of a Secret the chart does
// not make (secrets.existingSecret); it passes config.Load's checks.
func placeholder(name string) string {
	switch name {
	case "REDIS_URL":
		return "rediss://placeholder.invalid:6379/0"
	case "AGENTBOT_PAYLOAD_KEYS":
		return "placeholder=" + base64.StdEncoding.EncodeToString(make([]byte, 32))
	}
	return "placeholder-" + strings.ToLower(name)
}

// containerEnv resolves a container's environment as the kubelet would:
// envFrom first, env over it. Secret keys come from the rendered Secret,
// or placeholders for existingSecret.
func containerEnv(t *testing.T, r *rendered, c chartCase, ctr corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range ctr.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm := r.configMaps[ef.ConfigMapRef.Name]
			if cm == nil {
				t.Fatalf("%s: envFrom ConfigMap %s is not rendered", ctr.Name, ef.ConfigMapRef.Name)
			}
			for k, v := range cm.Data {
				env[ef.Prefix+k] = v
			}
		default:
			t.Errorf("%s: envFrom other than a ConfigMap (%+v): a Secret would hand every key to the process", ctr.Name, ef)
		}
	}
	seen := map[string]bool{}
	for _, e := range ctr.Env {
		if seen[e.Name] {
			t.Errorf("%s: %s set twice in env", ctr.Name, e.Name)
		}
		seen[e.Name] = true
		switch {
		case e.ValueFrom == nil:
			if slices.Contains(secretVars, e.Name) {
				t.Errorf("%s: secret %s has a literal value", ctr.Name, e.Name)
			}
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if s := r.secrets[ref.Name]; s != nil {
				v, ok := s.Data[ref.Key]
				if !ok && (ref.Optional == nil || !*ref.Optional) {
					t.Errorf("%s: %s reads key %q, which the Secret %s does not have", ctr.Name, e.Name, ref.Key, ref.Name)
				}
				if ok {
					env[e.Name] = string(v)
				}
			} else {
				if ref.Name != c.existingSecret {
					t.Errorf("%s: %s reads the Secret %s, which is neither rendered nor secrets.existingSecret", ctr.Name, e.Name, ref.Name)
				}
				env[e.Name] = placeholder(e.Name)
			}
		case e.ValueFrom.FieldRef != nil:
			env[e.Name] = "fieldref-" + e.ValueFrom.FieldRef.FieldPath
		default:
			t.Errorf("%s: %s has an unexpected valueFrom %+v", ctr.Name, e.Name, e.ValueFrom)
		}
	}
	return env
}

func environ(env map[string]string) []string {
	var out []string
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// mountedFile reports whether path is a file the container mounts: a
// volume item, or a file under a mounted directory.
func mountedFile(spec corev1.PodSpec, ctr corev1.Container, path string) bool {
	for _, m := range ctr.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, path)
		if err != nil || strings.HasPrefix(rel, "..") || rel == "." {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			var items []corev1.KeyToPath
			switch {
			case v.Secret != nil:
				items = v.Secret.Items
			case v.ConfigMap != nil:
				items = v.ConfigMap.Items
			default:
				return true // a directory another container fills (DinD's certificates)
			}
			return slices.ContainsFunc(items, func(it corev1.KeyToPath) bool { return it.Path == rel })
		}
	}
	return false
}

func TestEnvironmentLoads(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := render(t, c)
			allowed := allowedVars(c.extraVars)
			envs := map[string]map[string]string{}
			for comp, d := range r.deployments {
				spec := d.Spec.Template.Spec
				ctr := spec.Containers[0]
				env := containerEnv(t, r, c, ctr)
				for k := range env {
					if !allowed[k] {
						t.Errorf("%s: %s is not a variable agentbot or its libraries read", comp, k)
					}
				}
				cfg, err := config.Load(environ(env))
				if err != nil {
					t.Fatalf("%s: config.Load refuses the rendered environment:\n%v\n%s", comp, err, strings.Join(environ(env), "\n"))
				}
				if cfg.TemporalAddress == "" {
					t.Errorf("%s: no TEMPORAL_ADDRESS: the process would start an embedded dev server", comp)
				}
				// Logs are JSON unless the values say otherwise (full: text).
				if want := map[bool]string{true: "text", false: "json"}[c.name == "full"]; cfg.LogFormat != want {
					t.Errorf("%s: AGENTBOT_LOG_FORMAT is %q, want %q", comp, cfg.LogFormat, want)
				}
				// The approval policy reaches both processes whole.
				if c.name == "full" {
					p := cfg.TenantPolicy()
					if p.Approvals != "risky" || p.ChannelMode("C01") != "always" || p.ApprovalTimeout != 15*time.Minute || !p.TwoPerson ||
						!slices.Equal(p.ApprovalRulesOff, []string{"git-push"}) || len(p.ApprovalPatterns) != 2 ||
						p.ApprovalPatterns[0].Args != "apply*" || p.ApprovalPatterns[1].Command != "kubectl" || p.ApprovalPatterns[1].Args != "" {
						t.Errorf("%s: the approval policy: %+v", comp, p)
					}
				}
				// Metrics are on by default, on the port the
				// ServiceMonitor scrapes (http).
				if cfg.MetricsAddr != cfg.HTTPAddr {
					t.Errorf("%s: AGENTBOT_METRICS_ADDR is %q, want AGENTBOT_HTTP_ADDR %q", comp, cfg.MetricsAddr, cfg.HTTPAddr)
				}
				// The listen port is the container's port named http.
				_, port, _ := strings.Cut(cfg.HTTPAddr, ":")
				if !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool {
					return p.Name == "http" && strconv.Itoa(int(p.ContainerPort)) == port
				}) {
					t.Errorf("%s: AGENTBOT_HTTP_ADDR %s is not the container's http port %v", comp, cfg.HTTPAddr, ctr.Ports)
				}
				if !slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == cfg.StateDir }) {
					t.Errorf("%s: the state dir %s is not a volume", comp, cfg.StateDir)
				}
				// Every file a variable names is mounted.
				for _, k := range []string{"TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH",
					"SSL_CERT_FILE", "GOOGLE_APPLICATION_CREDENTIALS"} {
					if p := env[k]; p != "" && !mountedFile(spec, ctr, p) {
						t.Errorf("%s: %s=%s is not a mounted file", comp, k, p)
					}
				}
				if p := env["DOCKER_CERT_PATH"]; p != "" {
					for _, f := range []string{"ca.pem", "cert.pem", "key.pem"} {
						if !mountedFile(spec, ctr, filepath.Join(p, f)) {
							t.Errorf("%s: DOCKER_CERT_PATH has no %s", comp, f)
						}
					}
				}
				switch comp {
				case "bot":
					if err := cfg.ValidateGateway(); err != nil {
						t.Errorf("bot: ValidateGateway: %v", err)
					}
					if !cfg.ChatPlatform() {
						t.Error("bot: rendered without a chat platform (it would run the terminal chat)")
					}
					for _, k := range modelOnlyVars {
						if _, ok := env[k]; ok {
							t.Errorf("bot: has %s, which only the worker needs", k)
						}
					}
				case "worker":
					if cfg.Enabled("local") && cfg.ChatPlatform() {
						t.Error("worker: the local backend is on while serving chat")
					}
					for _, k := range receiveOnlyVars {
						if _, ok := env[k]; ok {
							t.Errorf("worker: has %s, which only the gateway needs", k)
						}
					}
					// The pod outlives the drain.
					grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
					if grace < cfg.DrainTimeout {
						t.Errorf("worker: terminationGracePeriodSeconds %v < AGENTBOT_DRAIN_TIMEOUT %v", grace, cfg.DrainTimeout)
					}
					if _, ok := env["AGENTBOT_DRAIN_TIMEOUT"]; !ok {
						t.Error("worker: AGENTBOT_DRAIN_TIMEOUT is not set, so the grace period matches only the default")
					}
					// model.timeout reaches the worker (full sets 90s).
					if want := map[bool]time.Duration{true: 90 * time.Second, false: config.DefaultModelTimeout}[c.name == "full"]; cfg.ModelTimeout != want {
						t.Errorf("worker: AGENTBOT_MODEL_TIMEOUT gives %v, want %v", cfg.ModelTimeout, want)
					}
				}
				envs[comp] = env
			}
			// The worker delivers to the platforms the bot serves, and both
			// reach Temporal the same way.
			if c.bot {
				for _, k := range []string{"SLACK_BOT_TOKEN", "DISCORD_TOKEN", "DISCORD_APP_ID", "AGENTBOT_SLACK_API_URL",
					"TEMPORAL_API_KEY", "TEMPORAL_TLS", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "AGENTBOT_BACKENDS", "AGENTBOT_DEFAULT_BACKEND",
					"AGENTBOT_PAYLOAD_KEYS"} {
					if envs["bot"][k] != envs["worker"][k] {
						t.Errorf("%s differs: bot %q, worker %q", k, envs["bot"][k], envs["worker"][k])
					}
				}
			}
		})
	}
}

// The environment check must be able to fail: an unknown AGENTBOT_ name
// in extraEnv is refused by config.Load in both processes.
func TestEnvironmentCheckCatchesUnknownVariable(t *testing.T) {
	c := cases[1] // minimal
	out, err := template(t, c.files,
		"--set-json", `bot.extraEnv=[{"name":"AGENTBOT_FOO","value":"1"}]`,
		"--set-json", `worker.extraEnv=[{"name":"AGENTBOT_FOO","value":"1"}]`)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeAll(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range []string{"bot", "worker"} {
		d := r.deployments[comp]
		if d == nil {
			t.Fatalf("no %s Deployment", comp)
		}
		env := containerEnv(t, r, c, d.Spec.Template.Spec.Containers[0])
		if _, err := config.Load(environ(env)); err == nil || !strings.Contains(err.Error(), "AGENTBOT_FOO") {
			t.Errorf("%s: config.Load accepted AGENTBOT_FOO: %v", comp, err)
		}
	}
}

// No secret reaches a ConfigMap: neither a secret's name as a key, nor a
// secret's value anywhere in the data.
func TestNoSecretInConfigMaps(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := render(t, c)
			var values []string
			for _, s := range r.secrets {
				for _, v := range s.Data {
					values = append(values, string(v))
				}
			}
			// And whatever the values files hold under secrets:.
			for _, f := range c.files {
				b, err := os.ReadFile(filepath.Join("testdata", f))
				if err != nil {
					t.Fatal(err)
				}
				var vals struct {
					Secrets map[string]any `json:"secrets"`
				}
				if err := yaml.Unmarshal(b, &vals); err != nil {
					t.Fatal(err)
				}
				for k, v := range vals.Secrets {
					if s, ok := v.(string); ok && s != "" && k != "existingSecret" {
						values = append(values, s)
					}
				}
			}
			if len(r.secrets) > 0 && len(values) == 0 {
				t.Fatal("a Secret with no values")
			}
			for _, cm := range r.configMaps {
				for k, v := range cm.Data {
					if slices.Contains(secretVars, k) {
						t.Errorf("ConfigMap %s holds the secret variable %s", cm.Name, k)
					}
					for _, s := range values {
						if strings.Contains(v, s) {
							t.Errorf("ConfigMap %s: %s holds a secret value", cm.Name, k)
						}
					}
				}
			}
			// The chart's Secret stores values, never empty keys.
			for _, s := range r.secrets {
				for k, v := range s.Data {
					if len(v) == 0 {
						t.Errorf("Secret %s: empty key %s", s.Name, k)
					}
				}
			}
		})
	}
}

// The grace period follows the drain: worker.drainTimeoutSeconds sets both.
func TestWorkerGraceFollowsDrain(t *testing.T) {
	out, err := template(t, nil, "--set", "worker.drainTimeoutSeconds=900", "--set", "worker.terminationGraceMarginSeconds=15")
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeAll(out)
	if err != nil {
		t.Fatal(err)
	}
	d := r.deployments["worker"]
	if got := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; got != 915 {
		t.Errorf("terminationGracePeriodSeconds %d, want 915", got)
	}
	if got := r.configMaps[releaseName+"-agentbot-worker"].Data["AGENTBOT_DRAIN_TIMEOUT"]; got != "900s" {
		t.Errorf("AGENTBOT_DRAIN_TIMEOUT %q, want 900s", got)
	}
}

// notes renders NOTES.txt, which helm template leaves out: a copy of the
// chart gets a template that renders it into a ConfigMap.
func notes(t *testing.T, files []string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "agentbot")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(dir, "templates", "NOTES.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes-preview.txt"), text, 0o644); err != nil {
		t.Fatal(err)
	}
	preview := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n  notes: |\n    {{- tpl (.Files.Get \"notes-preview.txt\") . | nindent 4 }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes-preview.yaml"), []byte(preview), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"template", releaseName, dir, "--namespace", namespace, "--kube-version", kubeVersion,
		"--show-only", "templates/zz-notes-preview.yaml"}, valuesArgs(files)...)
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := strictDecode([]byte(out), &cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data["notes"]
}

func TestNotes(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		n := notes(t, nil)
		for _, want := range []string{"NOT SERVING ANY CHAT YET", "slack.enabled", "no backend is configured", "lost with the pod", "kubectl -n agentbot get pods"} {
			if !strings.Contains(n, want) {
				t.Errorf("NOTES lack %q:\n%s", want, n)
			}
		}
	})
	t.Run("full", func(t *testing.T) {
		n := notes(t, []string{"full-values.yaml"})
		host := "https://agentbot.example.com"
		// The URLs are the paths the Slack adapter serves.
		for _, want := range []string{host + slackbot.PathEvents, host + slackbot.PathInteractivity, host + slackbot.PathCommands,
			host + "/discord/interactions", "logs deploy/" + releaseName + "-ab-bot", "logs deploy/" + releaseName + "-ab-worker"} {
			if !strings.Contains(n, want) {
				t.Errorf("NOTES lack %q:\n%s", want, n)
			}
		}
		if strings.Contains(n, "WARNING") || strings.Contains(n, "NOT SERVING") {
			t.Errorf("NOTES warn about a complete configuration:\n%s", n)
		}
	})
	t.Run("full-dind", func(t *testing.T) {
		n := notes(t, []string{"full-dind-values.yaml"})
		for _, want := range []string{"PRIVILEGED", "Socket Mode", "needs exactly one worker"} {
			if !strings.Contains(n, want) {
				t.Errorf("NOTES lack %q:\n%s", want, n)
			}
		}
	})
}

// The Ingress routes the prefixes the bot's handlers serve.
func TestIngressRoutesBotPaths(t *testing.T) {
	r := render(t, cases[2]) // full: Slack over HTTP, Discord interactions
	var ing *networkingv1.Ingress
	for _, o := range r.objects {
		if o.kind == "Ingress" {
			ing = &networkingv1.Ingress{}
			if err := strictDecode(o.yaml, ing); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ing == nil {
		t.Fatal("no Ingress")
	}
	for _, rule := range ing.Spec.Rules {
		var prefixes []string
		for _, p := range rule.HTTP.Paths {
			prefixes = append(prefixes, p.Path)
			if p.Backend.Service == nil || p.Backend.Service.Name != releaseName+"-ab-bot" || p.Backend.Service.Port.Name != "http" {
				t.Errorf("%s%s goes to %+v", rule.Host, p.Path, p.Backend)
			}
		}
		for _, path := range []string{slackbot.PathEvents, slackbot.PathCommands, slackbot.PathInteractivity, "/discord/interactions"} {
			if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(path, p) }) {
				t.Errorf("%s: %s is not routed (prefixes %v)", rule.Host, path, prefixes)
			}
		}
	}
}
