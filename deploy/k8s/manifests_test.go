package k8s

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringcache/ringcache/internal/embedetcd"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// The objects of the manifests, by kind.
type manifests struct {
	sets     []*appsv1.StatefulSet
	services []*corev1.Service
	pdbs     []*policyv1.PodDisruptionBudget
}

// kustomization is the part of kustomize's Kustomization these manifests
// use; decoding is strict, so a field outside it fails the test.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// load decodes every manifest the kustomization lists, strictly: an unknown
// or repeated field, a value of the wrong type or an unknown kind fails.
func load(t *testing.T) (manifests, kustomization) {
	t.Helper()
	var k kustomization
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: %s %s", k.APIVersion, k.Kind)
	}
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	if got := slices.Sorted(slices.Values(k.Resources)); !slices.Equal(got, files) {
		t.Fatalf("kustomization resources %v, but the directory holds %v", got, files)
	}

	var m manifests
	for _, file := range k.Resources {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(data), -1) {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s #%d: %v", file, i+1, err)
			}
			if meta.Kind == "" {
				if strings.TrimSpace(stripComments(doc)) != "" {
					t.Fatalf("%s #%d: a document without a kind", file, i+1)
				}
				continue
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "v1 Service":
				s := &corev1.Service{}
				m.services, obj = append(m.services, s), s
			case "apps/v1 StatefulSet":
				s := &appsv1.StatefulSet{}
				m.sets, obj = append(m.sets, s), s
			case "policy/v1 PodDisruptionBudget":
				p := &policyv1.PodDisruptionBudget{}
				m.pdbs, obj = append(m.pdbs, p), p
			default:
				t.Fatalf("%s #%d: %s %s: not a kind this test knows", file, i+1, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s #%d (%s): %v", file, i+1, meta.Kind, err)
			}
		}
	}
	return m, k
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

func (m manifests) set(t *testing.T, name string) *appsv1.StatefulSet {
	t.Helper()
	i := slices.IndexFunc(m.sets, func(s *appsv1.StatefulSet) bool { return s.Name == name })
	if i < 0 {
		t.Fatalf("no StatefulSet %s", name)
	}
	return m.sets[i]
}

func (m manifests) service(t *testing.T, name string) *corev1.Service {
	t.Helper()
	i := slices.IndexFunc(m.services, func(s *corev1.Service) bool { return s.Name == name })
	if i < 0 {
		t.Fatalf("no Service %s", name)
	}
	return m.services[i]
}

// selected returns the StatefulSets whose pods sel selects.
func (m manifests) selected(t *testing.T, sel *metav1.LabelSelector) []*appsv1.StatefulSet {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	if s.Empty() {
		t.Fatal("an empty selector selects every pod")
	}
	var out []*appsv1.StatefulSet
	for _, set := range m.sets {
		if s.Matches(labels.Set(set.Spec.Template.Labels)) {
			out = append(out, set)
		}
	}
	return out
}

func containerPort(c *corev1.Container, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

func namedPort(t *testing.T, c *corev1.Container, name string) int32 {
	t.Helper()
	p, ok := containerPort(c, intstr.FromString(name))
	if !ok {
		t.Fatalf("container %s has no port %q", c.Name, name)
	}
	return p.ContainerPort
}

func container(t *testing.T, set *appsv1.StatefulSet, name string) *corev1.Container {
	t.Helper()
	cs := set.Spec.Template.Spec.Containers
	i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("StatefulSet %s has no container %s", set.Name, name)
	}
	return &cs[i]
}

func envValue(t *testing.T, c *corev1.Container, name string) string {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("container %s sets no %s", c.Name, name)
	return ""
}

// probes returns a container's probes by kind.
func probes(c *corev1.Container) map[string]*corev1.Probe {
	out := map[string]*corev1.Probe{}
	for kind, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p != nil {
			out[kind] = p
		}
	}
	return out
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// TestManifestsCrossReferences checks what the API server would accept and
// what it would not catch: every selector selects the pods it means, every
// port and probe names a port the container has, and every $(VAR) is
// defined before it is used.
func TestManifestsCrossReferences(t *testing.T) {
	m, k := load(t)
	if len(m.sets) != 2 || len(m.services) != 3 || len(m.pdbs) != 2 {
		t.Fatalf("%d StatefulSets, %d Services, %d PodDisruptionBudgets; want 2, 3, 2", len(m.sets), len(m.services), len(m.pdbs))
	}
	for _, set := range m.sets {
		if got := m.selected(t, set.Spec.Selector); len(got) != 1 || got[0] != set {
			t.Errorf("StatefulSet %s: its selector does not select its own pods alone", set.Name)
		}
		svc := m.service(t, set.Spec.ServiceName)
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("StatefulSet %s: its service %s must be headless and publish pods before they are ready", set.Name, svc.Name)
		}
		for _, c := range set.Spec.Template.Spec.Containers {
			if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("%s/%s: no memory request or limit", set.Name, c.Name)
			}
			for kind, p := range probes(&c) {
				if p.HTTPGet == nil {
					t.Errorf("%s/%s: %s probe is not an HTTP GET", set.Name, c.Name, kind)
					continue
				}
				if _, ok := containerPort(&c, p.HTTPGet.Port); !ok {
					t.Errorf("%s/%s: %s probe port %s is not a container port", set.Name, c.Name, kind, p.HTTPGet.Port.String())
				}
			}
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s/%s: want a readiness and a liveness probe", set.Name, c.Name)
			}
			defined := map[string]bool{}
			for _, e := range c.Env {
				for _, ref := range varRef.FindAllStringSubmatch(e.Value, -1) {
					if !defined[ref[1]] {
						t.Errorf("%s/%s: %s uses $(%s) before it is defined", set.Name, c.Name, e.Name, ref[1])
					}
				}
				defined[e.Name] = true
			}
			for _, a := range c.Args {
				for _, ref := range varRef.FindAllStringSubmatch(a, -1) {
					if !defined[ref[1]] {
						t.Errorf("%s/%s: argument %q uses undefined $(%s)", set.Name, c.Name, a, ref[1])
					}
				}
			}
			for _, vm := range c.VolumeMounts {
				ok := slices.ContainsFunc(set.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name }) ||
					slices.ContainsFunc(set.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == vm.Name })
				if !ok {
					t.Errorf("%s/%s: mount %s names no volume", set.Name, c.Name, vm.Name)
				}
			}
		}
	}
	for _, svc := range m.services {
		sets := m.selected(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
		if len(sets) != 1 {
			t.Errorf("Service %s selects the pods of %d StatefulSets, want 1", svc.Name, len(sets))
			continue
		}
		for _, p := range svc.Spec.Ports {
			found := false
			for _, c := range sets[0].Spec.Template.Spec.Containers {
				if _, ok := containerPort(&c, p.TargetPort); ok {
					found = true
				}
			}
			if !found {
				t.Errorf("Service %s: target port %s is no container port of %s", svc.Name, p.TargetPort.String(), sets[0].Name)
			}
		}
	}
	for _, pdb := range m.pdbs {
		sets := m.selected(t, pdb.Spec.Selector)
		if len(sets) != 1 {
			t.Errorf("PodDisruptionBudget %s selects the pods of %d StatefulSets, want 1", pdb.Name, len(sets))
			continue
		}
		replicas := int(*sets[0].Spec.Replicas)
		allowed := 0
		switch {
		case pdb.Spec.MaxUnavailable != nil:
			allowed = pdb.Spec.MaxUnavailable.IntValue()
		case pdb.Spec.MinAvailable != nil:
			allowed = replicas - pdb.Spec.MinAvailable.IntValue()
		}
		if allowed != 1 {
			t.Errorf("PodDisruptionBudget %s lets %d of %d pods go at once, want 1", pdb.Name, allowed, replicas)
		}
	}

	// The images are the ones deploy/up.sh builds, at the tags the
	// kustomization sets.
	lib, err := os.ReadFile("../lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ set, container, variable string }{
		{"ringcached", "ringcached", "RINGCACHE_IMAGE"},
		{"etcd", "etcd", "RINGCACHE_ETCD_IMAGE"},
	} {
		re := regexp.MustCompile(tc.variable + `:-([^}]+)\}`)
		mm := re.FindSubmatch(lib)
		if mm == nil {
			t.Fatalf("lib.sh has no default for %s", tc.variable)
		}
		// The default project's images: lib.sh names them after the project.
		want := strings.ReplaceAll(string(mm[1]), "$COMPOSE_PROJECT_NAME", "ringcache")
		c := container(t, m.set(t, tc.set), tc.container)
		if c.Image != want {
			t.Errorf("%s image %s, but deploy/up.sh builds %s", tc.set, c.Image, want)
		}
		name, tag, _ := strings.Cut(want, ":")
		i := slices.IndexFunc(k.Images, func(im struct {
			Name    string `json:"name"`
			NewName string `json:"newName,omitempty"`
			NewTag  string `json:"newTag,omitempty"`
		}) bool {
			return im.Name == name
		})
		if i < 0 || k.Images[i].NewTag != tag {
			t.Errorf("kustomization images: want %s with newTag %s", name, tag)
		}
	}
}

// TestEtcdMembers checks that the etcd members' flags agree with the
// StatefulSet: one member per replica, named and addressed as the
// StatefulSet and its headless Service name them, on the container's ports,
// from the etcd version go.mod pins.
func TestEtcdMembers(t *testing.T) {
	m, _ := load(t)
	set := m.set(t, "etcd")
	c := container(t, set, "etcd")
	replicas := int(*set.Spec.Replicas)
	if replicas != 3 {
		t.Fatalf("etcd replicas %d, want 3", replicas)
	}
	if set.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Error("etcd members must start in parallel: one alone is never ready")
	}
	client, peer := namedPort(t, c, "client"), namedPort(t, c, "peer")
	flags := map[string]string{}
	for _, a := range c.Args {
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Fatalf("etcd argument %q: want --flag=value", a)
		}
		flags[k] = v
	}
	member := func(i int) string { return fmt.Sprintf("%s-%d", set.Name, i) }
	host := func(name string) string { return name + "." + set.Spec.ServiceName }
	var initial []string
	for i := range replicas {
		initial = append(initial, fmt.Sprintf("%s=http://%s:%d", member(i), host(member(i)), peer))
	}
	for flag, want := range map[string]string{
		"name":                        "$(POD_NAME)",
		"initial-cluster":             strings.Join(initial, ","),
		"advertise-client-urls":       fmt.Sprintf("http://%s:%d", host("$(POD_NAME)"), client),
		"initial-advertise-peer-urls": fmt.Sprintf("http://%s:%d", host("$(POD_NAME)"), peer),
		"listen-client-urls":          fmt.Sprintf("http://0.0.0.0:%d", client),
		"listen-peer-urls":            fmt.Sprintf("http://0.0.0.0:%d", peer),
		"initial-cluster-state":       "new",
	} {
		if flags[flag] != want {
			t.Errorf("etcd --%s=%s, want %s", flag, flags[flag], want)
		}
	}
	dataDir := flags["data-dir"]
	if !slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return strings.HasPrefix(dataDir+"/", strings.TrimSuffix(vm.MountPath, "/")+"/") &&
			slices.ContainsFunc(set.Spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == vm.Name })
	}) {
		t.Errorf("etcd --data-dir=%s is not on a persistent volume", dataDir)
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	v := regexp.MustCompile(`go\.etcd\.io/etcd/server/v3 (v\S+)`).FindSubmatch(mod)
	if v == nil || !strings.HasSuffix(c.Image, ":"+string(v[1])) {
		t.Errorf("etcd image %s, but go.mod pins etcd %s", c.Image, v)
	}
	if goMem, ok := envQuantity(c, "GOMEMLIMIT"); ok && goMem.Cmp(*c.Resources.Limits.Memory()) >= 0 {
		t.Errorf("etcd GOMEMLIMIT %s is not below its memory limit %s", goMem.String(), c.Resources.Limits.Memory())
	}
}

// envQuantity reads a Go memory limit ("450MiB") as a quantity.
func envQuantity(c *corev1.Container, name string) (resource.Quantity, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			q, err := resource.ParseQuantity(strings.TrimSuffix(strings.TrimSuffix(e.Value, "B"), "i") + "i")
			return q, err == nil
		}
	}
	return resource.Quantity{}, false
}

// TestRingcachedSettings checks the daemon's settings in the manifest
// against the daemon itself: every variable is one of its settings, the
// listeners match the container ports and the Services, the etcd endpoints
// are the etcd members, the secret file is the mounted Secret, and the
// shutdown fits the grace period.
func TestRingcachedSettings(t *testing.T) {
	m, _ := load(t)
	set := m.set(t, "ringcached")
	c := container(t, set, "ringcached")
	known := daemonEnv(t)

	podVars := map[string]bool{"POD_NAME": true, "POD_IP": true, "POD_NAMESPACE": true}
	for _, e := range c.Env {
		switch {
		case strings.HasPrefix(e.Name, "RINGCACHE_"):
			if !known[e.Name] {
				t.Errorf("%s is not a setting of ringcached (see ringcached -help)", e.Name)
			}
		case podVars[e.Name]:
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
				t.Errorf("%s: want a field reference", e.Name)
			}
		case e.Name == "GOMEMLIMIT":
			t.Errorf("GOMEMLIMIT is set: the daemon derives its limit from the budgets and the cgroup, and checks that they fit")
		default:
			t.Errorf("%s: neither a daemon setting nor a pod field", e.Name)
		}
	}
	if !known["RINGCACHE_SECRET_FILE"] {
		t.Errorf("RINGCACHE_SECRET_FILE is not a setting of ringcached: the manifests mount the secret as a file")
	}

	httpPort, peer := namedPort(t, c, "http"), namedPort(t, c, "peer")
	for _, tc := range []struct {
		variable string
		port     int32
	}{{"RINGCACHE_LISTEN", httpPort}, {"RINGCACHE_PEER_LISTEN", peer}} {
		_, p, err := net.SplitHostPort(envValue(t, c, tc.variable))
		if err != nil || p != strconv.Itoa(int(tc.port)) {
			t.Errorf("%s=%s, but the container port is %d", tc.variable, envValue(t, c, tc.variable), tc.port)
		}
	}
	peers := m.service(t, set.Spec.ServiceName)
	if len(peers.Spec.Ports) != 1 || peers.Spec.Ports[0].TargetPort.String() != "peer" {
		t.Errorf("the peers Service %s must publish the peer port only", peers.Name)
	}
	u, err := url.Parse(envValue(t, c, "RINGCACHE_PEER_URL"))
	if err != nil || u.Scheme != "http" || u.Hostname() != "$(POD_NAME)."+peers.Name || u.Port() != strconv.Itoa(int(peer)) {
		t.Errorf("RINGCACHE_PEER_URL %s: want http://$(POD_NAME).%s:%d, the pod's name under the peers Service", envValue(t, c, "RINGCACHE_PEER_URL"), peers.Name, peer)
	}
	if envValue(t, c, "RINGCACHE_NODE_ID") != "$(POD_NAME)" {
		t.Error("RINGCACHE_NODE_ID: want $(POD_NAME), stable across restarts")
	}
	clients := m.service(t, "ringcached")
	if len(clients.Spec.Ports) != 1 || clients.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("the client Service must publish the public port only")
	}

	etcd := m.set(t, "etcd")
	clientPort := namedPort(t, container(t, etcd, "etcd"), "client")
	var want []string
	for i := range int(*etcd.Spec.Replicas) {
		want = append(want, fmt.Sprintf("http://%s-%d.%s:%d", etcd.Name, i, etcd.Spec.ServiceName, clientPort))
	}
	if got := envValue(t, c, "RINGCACHE_ETCD"); got != strings.Join(want, ",") {
		t.Errorf("RINGCACHE_ETCD=%s, want every member: %s", got, strings.Join(want, ","))
	}

	secretFile := envValue(t, c, "RINGCACHE_SECRET_FILE")
	found := false
	for _, vm := range c.VolumeMounts {
		for _, v := range set.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			for _, item := range v.Secret.Items {
				if path.Join(vm.MountPath, item.Path) == secretFile {
					found = true
					if vm.SubPath != "" {
						t.Error("the secret is mounted with subPath: an updated Secret would never reach the file")
					}
					if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o007 != 0 {
						t.Error("the secret file must not be readable by others")
					}
				}
			}
		}
	}
	if !found {
		t.Errorf("RINGCACHE_SECRET_FILE=%s is no file of a mounted Secret", secretFile)
	}

	shutdown, err := time.ParseDuration(envValue(t, c, "RINGCACHE_SHUTDOWN_TIMEOUT"))
	if err != nil {
		t.Fatal(err)
	}
	var sleep time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatal("no preStop sleep: the endpoints would still send requests when the node leaves")
	}
	sleep = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	grace := time.Duration(*set.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if sleep < 2*time.Second || grace < sleep+shutdown+time.Second {
		t.Errorf("preStop %v + shutdown timeout %v do not fit the grace period %v with a second to spare", sleep, shutdown, grace)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("readiness %s, liveness %s: want /readyz (503 while stopping) and /healthz", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	lim, req := c.Resources.Limits.Memory(), c.Resources.Requests.Memory()
	if lim.Cmp(*req) != 0 {
		t.Errorf("memory request %s != limit %s: a cache holds its memory, so it should be guaranteed", req, lim)
	}
}

// TestRunsAsConfigured runs etcd and ringcached with the manifests'
// settings (on loopback, with the pod's fields filled in) and sends every
// probe: each must answer 200. The daemon's log says what memory its groups
// need; the container's memory limit must be at least that, or the daemon
// would refuse to start in the pod.
func TestRunsAsConfigured(t *testing.T) {
	m, _ := load(t)

	etcdURL, etcdProbes := startEtcd(t, container(t, m.set(t, "etcd"), "etcd"))
	for kind, p := range etcdProbes {
		if code := getCode(t, etcdURL+p); code != 200 {
			t.Errorf("etcd %s probe %s: %d", kind, p, code)
		}
	}

	set := m.set(t, "ringcached")
	c := container(t, set, "ringcached")
	vars := map[string]string{"POD_NAME": set.Name + "-0", "POD_IP": "127.0.0.1", "POD_NAMESPACE": "ringcache"}
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("a-test-secret-of-32-bytes-or-so!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	writeToken := filepath.Join(t.TempDir(), "write-token")
	if err := os.WriteFile(writeToken, []byte("a-test-write-token-of-32-bytes!!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		v := varRef.ReplaceAllStringFunc(e.Value, func(ref string) string { return vars[varRef.FindStringSubmatch(ref)[1]] })
		switch e.Name {
		case "POD_NAME", "POD_IP", "POD_NAMESPACE":
			continue
		case "RINGCACHE_LISTEN", "RINGCACHE_PEER_LISTEN":
			v = "127.0.0.1:0" // the ports are checked against the container above
		case "RINGCACHE_PEER_URL":
			continue // derived from the loopback peer listener
		case "RINGCACHE_ETCD":
			v = etcdURL
		case "RINGCACHE_SECRET_FILE":
			v = secret
		case "RINGCACHE_WRITE_TOKEN_FILE":
			v = writeToken
		}
		env = append(env, e.Name+"="+v)
	}
	cmd := exec.Command(daemon(t), c.Args...)
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	wait := func() error {
		var err error
		once.Do(func() { err = cmd.Wait() })
		return err
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = wait()
	})

	logs := make(chan map[string]any, 64)
	go func() {
		defer close(logs)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil {
				logs <- rec
			}
		}
	}()
	var addr, minContainer string
	timeout := time.After(60 * time.Second)
	for addr == "" {
		select {
		case rec, ok := <-logs:
			if !ok {
				t.Fatalf("ringcached exited before it was ready: %v\n%s", wait(), stderr.String())
			}
			switch rec["msg"] {
			case "memory limit":
				minContainer, _ = rec["min_container"].(string)
			case "node ready":
				addr, _ = rec["addr"].(string)
			}
		case <-timeout:
			t.Fatalf("ringcached not ready after 60s\n%s", stderr.String())
		}
	}
	go func() {
		for range logs { // keep the pipe drained
		}
	}()

	for kind, p := range probes(c) {
		if code := getCode(t, "http://"+addr+p.HTTPGet.Path); code != 200 {
			t.Errorf("ringcached %s probe %s: %d", kind, p.HTTPGet.Path, code)
		}
	}
	if code := getCode(t, "http://"+addr+"/cache/demo/hello"); code != 200 {
		t.Errorf("GET /cache/demo/hello: %d", code)
	}

	need, err := resource.ParseQuantity(strings.TrimSuffix(minContainer, "B"))
	if minContainer == "" || err != nil {
		t.Fatalf("the daemon logged no usable min_container (%q): %v", minContainer, err)
	}
	if lim := c.Resources.Limits.Memory(); lim.Cmp(need) < 0 {
		t.Errorf("memory limit %s is below the %s the groups need: the daemon would refuse to start", lim, minContainer)
	} else {
		t.Logf("memory limit %s; the groups need %s", lim, minContainer)
	}

	// SIGTERM, as the kubelet sends after the preStop: the node leaves and
	// exits 0 within the grace period.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	grace := time.Duration(*set.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	done := make(chan error, 1)
	go func() { done <- wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ringcached exited with %v after SIGTERM\n%s", err, stderr.String())
		}
	case <-time.After(grace):
		t.Fatalf("ringcached still running %v after SIGTERM", grace)
	}
}

func getCode(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// startEtcd runs an embedded etcd on loopback and returns its client URL
// and the probe paths of the etcd container.
func startEtcd(t *testing.T, c *corev1.Container) (string, map[string]string) {
	t.Helper()
	paths := map[string]string{}
	for kind, p := range probes(c) {
		paths[kind] = p.HTTPGet.Path
	}
	return embedetcd.ForTest(t), paths
}

var (
	daemonOnce sync.Once
	daemonPath string
	daemonErr  error
	buildDir   string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// daemon builds ringcached once, with the flags deploy/up.sh uses, so that
// the build is shared with it.
func daemon(t *testing.T) string {
	t.Helper()
	daemonOnce.Do(func() {
		buildDir, daemonErr = os.MkdirTemp("", "ringcache-k8s-test")
		if daemonErr != nil {
			return
		}
		daemonPath = filepath.Join(buildDir, "ringcached")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", daemonPath, "github.com/ringcache/ringcache/cmd/ringcached")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			daemonErr = fmt.Errorf("building ringcached: %v\n%s", err, out)
		}
	})
	if daemonErr != nil {
		t.Fatal(daemonErr)
	}
	return daemonPath
}

// daemonEnv returns the environment variables ringcached reads, from its
// own -help.
func daemonEnv(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command(daemon(t), "serve", "-help").Output()
	if err != nil {
		t.Fatalf("ringcached -help: %v", err)
	}
	names := map[string]bool{}
	for _, n := range regexp.MustCompile(`\bRINGCACHE_[A-Z0-9_]+`).FindAll(out, -1) {
		names[string(n)] = true
	}
	if !names["RINGCACHE_LISTEN"] || !names["RINGCACHE_GROUP"] {
		t.Fatalf("ringcached -help lists no settings:\n%s", out)
	}
	return names
}
