package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

const chartNamespace = "flexgv-system"

// renderChart renders deploy/helm/flexgv as helm install would, with
// values over the chart's and the API versions extra (e.g.
// monitoring.coreos.com/v1) present, and returns its objects.
func renderChart(values map[string]any, extra ...string) ([]*unstructured.Unstructured, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.APIVersions = append(caps.APIVersions, extra...)
	return renderChartFor(values, caps, false)
}

// renderChartFor renders the chart for a cluster of caps; where cluster,
// as helm does against the test's API server (its lookup functions read
// the objects there).
func renderChartFor(values map[string]any, caps *chartutil.Capabilities, cluster bool) ([]*unstructured.Unstructured, error) {
	ch, err := loader.Load(filepath.Join("..", "..", "deploy", "helm", "flexgv"))
	if err != nil {
		return nil, err
	}
	merged, err := chartutil.CoalesceValues(ch, values)
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ToRenderValues(ch, merged, chartutil.ReleaseOptions{Name: "flexgv", Namespace: chartNamespace, IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	var files map[string]string
	if cluster {
		files, err = engine.RenderWithClient(ch, vals, cp.Config)
	} else {
		files, err = engine.Render(ch, vals)
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, n := range names {
		if !strings.HasSuffix(n, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(files[n], "\n---") {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				return nil, fmt.Errorf("%s: %w\n%s", n, err, doc)
			}
			if len(m) > 0 {
				objs = append(objs, &unstructured.Unstructured{Object: m})
			}
		}
	}
	return objs, nil
}

// chartExtenders is the extenders section of the chart's kube-scheduler
// configuration, with urlPrefix pointed at url: the tests' kube-scheduler
// runs the extender as deployed.
func chartExtenders(url string) (string, error) {
	objs, err := renderChart(nil)
	if err != nil {
		return "", err
	}
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" || !strings.HasSuffix(o.GetName(), "-scheduler") {
			continue
		}
		text, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
		var cfg map[string]any
		if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
			return "", err
		}
		exts, _ := cfg["extenders"].([]any)
		if len(exts) != 1 {
			return "", fmt.Errorf("the chart's scheduler configuration has %d extenders, want 1", len(exts))
		}
		exts[0].(map[string]any)["urlPrefix"] = url
		b, err := yaml.Marshal(map[string]any{"extenders": exts})
		return string(b), err
	}
	return "", fmt.Errorf("the chart has no scheduler ConfigMap")
}

// The chart's objects are what the API server accepts (server-side dry run:
// schema, defaults, validation), and it has what the README promises.
func TestChartInstalls(t *testing.T) {
	objs, err := renderChart(nil)
	if err != nil {
		t.Fatal(err)
	}
	chartNS(t)
	kinds := dryRun(t, objs)
	for kind, n := range map[string]int{"DaemonSet": 1, "Deployment": 2, "ValidatingWebhookConfiguration": 1, "MutatingWebhookConfiguration": 1, "ConfigMap": 2,
		"PodDisruptionBudget": 1, "Role": 1, "RoleBinding": 1} {
		if kinds[kind] != n {
			t.Errorf("the chart has %d %s, want %d (all: %v)", kinds[kind], kind, n, kinds)
		}
	}
	checkNodeDaemonArgs(t, objs, false)
	checkDashboard(t, objs, true)
	noDashboard, err := renderChart(map[string]any{"grafanaDashboard": map[string]any{"enabled": false}})
	if err != nil {
		t.Fatal(err)
	}
	checkDashboard(t, noDashboard, false)
	checkPods(t, objs)
	if kinds["ServiceMonitor"] != 0 {
		t.Errorf("a ServiceMonitor without the Prometheus operator's API")
	}
	withOperator, err := renderChart(nil, "monitoring.coreos.com/v1")
	if err != nil {
		t.Fatal(err)
	}
	monitors := 0
	for _, o := range withOperator {
		if o.GetKind() == "ServiceMonitor" {
			monitors++
		}
	}
	if monitors != 1 {
		t.Errorf("%d ServiceMonitors with the Prometheus operator's API, want 1", monitors)
	}
	// Remote vGPUs on: flexgv serve beside the daemon, its flags, Secrets.
	remote, err := renderChart(map[string]any{"remote": map[string]any{"port": 7070, "slots": 2}})
	if err != nil {
		t.Fatal(err)
	}
	dryRun(t, remote)
	checkNodeDaemonArgs(t, remote, true)
	// The daemon moves programs off a drained node through the admin
	// socket of the flexgv serve beside it.
	for _, o := range remote {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		daemonArgs, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		serveArgs, _, _ := unstructured.NestedStringSlice(containers[1].(map[string]any), "args")
		const path = "/dev/shm/flexgv/remote-serve.admin"
		if !slices.Contains(daemonArgs, "--serve-admin="+path) || !slices.Contains(serveArgs, "--admin=unix://"+path) {
			t.Errorf("the daemon runs with %v, flexgv serve with %v: want one admin socket, %s", daemonArgs, serveArgs, path)
		}
	}
	// Secrets: of the chart's namespace only (TestChartNodeReadsSecretsOnlyInItsNamespace
	// asks the API server).
	secrets := map[string]bool{}
	for _, o := range remote {
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
			if slices.Contains(res, "secrets") {
				secrets[o.GetKind()+" "+o.GetNamespace()] = true
			}
		}
	}
	if len(secrets) != 1 || !secrets["Role "+chartNamespace] {
		t.Errorf("with remote vGPUs, Secrets granted by %v; want by a Role of %s alone", secrets, chartNamespace)
	}
	// MPS on: the daemon runs it, with the pipes in a node folder that pods
	// given part of the SMs get too; its /dev/shm stays its own.
	withMPS, err := renderChart(map[string]any{"node": map[string]any{"mps": map[string]any{"enabled": true}}})
	if err != nil {
		t.Fatal(err)
	}
	dryRun(t, withMPS)
	checkNodeDaemonArgs(t, withMPS, false)
	for _, d := range daemonSets(withMPS) {
		shm, pipe := slices.Contains(d.mounts, "/dev/shm"), slices.Contains(d.mounts, "/run/flexgv/mps/pipe")
		if !slices.Contains(d.args, "--mps") || !slices.Contains(d.args, "--mps-pods") || shm || !pipe {
			t.Errorf("with MPS on, the daemon runs with %v and mounts %v; want --mps, --mps-pods, the pipe folder and no /dev/shm", d.args, d.mounts)
		}
	}
	checkSuspend(t, objs, false)
	withSuspend, err := renderChart(map[string]any{"node": map[string]any{"suspend": map[string]any{"enabled": true}}})
	if err != nil {
		t.Fatal(err)
	}
	dryRun(t, withSuspend)
	checkNodeDaemonArgs(t, withSuspend, false)
	checkSuspend(t, withSuspend, true)
	// CDI by default: the daemon sees the node's CDI specs; off, with the
	// driver's folder given: that folder, at its path on the node.
	for _, tc := range []struct {
		values map[string]any
		arg    string
		mounts []string
	}{
		{nil, "--cdi=auto", []string{"/etc/cdi", "/var/run/cdi"}},
		{map[string]any{"node": map[string]any{"cdi": "off", "driverLibs": "/usr/lib/x86_64-linux-gnu"}}, "--driver-libs=/usr/lib/x86_64-linux-gnu",
			[]string{"/usr/lib/x86_64-linux-gnu"}},
		{map[string]any{"node": map[string]any{"gpus": []any{"GPU-1", "2"}}}, "--gpus=GPU-1,2", []string{"/etc/cdi", "/var/run/cdi"}},
	} {
		objs, err := renderChart(tc.values)
		if err != nil {
			t.Fatal(err)
		}
		dryRun(t, objs)
		checkNodeDaemonArgs(t, objs, false)
		for _, d := range daemonSets(objs) {
			var paths []string
			for _, p := range d.mounts {
				if slices.Contains([]string{"/etc/cdi", "/var/run/cdi", "/usr/lib/x86_64-linux-gnu"}, p) {
					paths = append(paths, p)
				}
			}
			if !slices.Contains(d.args, tc.arg) || !slices.Equal(paths, tc.mounts) {
				t.Errorf("values %v: the daemon runs with %v, mounts %v; want %s and %v", tc.values, d.args, paths, tc.arg, tc.mounts)
			}
		}
	}
}

// checkSuspend checks what suspending pods (on) takes of the node's
// DaemonSet and role, and that it is all absent otherwise: the host's PID
// namespace, CAP_SYS_PTRACE and the driver's compute libraries (the
// checkpoint API reaches pods' processes through /proc), the flag, and the
// right to set pods' conditions.
func checkSuspend(t *testing.T, objs []*unstructured.Unstructured, on bool) {
	t.Helper()
	for _, o := range objs {
		switch o.GetKind() {
		case "DaemonSet":
			hostPID, _, _ := unstructured.NestedBool(o.Object, "spec", "template", "spec", "hostPID")
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			c := containers[0].(map[string]any)
			args, _, _ := unstructured.NestedStringSlice(c, "args")
			caps, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "add")
			env, _, _ := unstructured.NestedSlice(c, "env")
			var driverCaps []string
			for _, e := range env {
				if m := e.(map[string]any); m["name"] == "NVIDIA_DRIVER_CAPABILITIES" {
					driverCaps = append(driverCaps, fmt.Sprint(m["value"]))
				}
			}
			got := hostPID && slices.Contains(args, "--suspend-pods") && slices.Equal(caps, []string{"SYS_PTRACE"}) && slices.Equal(driverCaps, []string{"compute,utility"})
			none := !hostPID && !slices.Contains(args, "--suspend-pods") && len(caps) == 0 && slices.Equal(driverCaps, []string{"utility"})
			if on && !got || !on && !none {
				t.Errorf("suspend %v: the daemon's hostPID %v, args %v, capabilities %v, NVIDIA_DRIVER_CAPABILITIES %v", on, hostPID, args, caps, driverCaps)
			}
		case "ClusterRole":
			if !strings.HasSuffix(o.GetName(), "-node") {
				continue
			}
			status := false
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
				status = status || slices.Contains(res, "pods/status")
			}
			if status != on {
				t.Errorf("suspend %v: the node may set pods' status: %v", on, status)
			}
		}
	}
}

// daemonSet is what a rendered DaemonSet's first container runs with:
// its arguments and the paths it mounts.
type daemonSet struct{ args, mounts []string }

func daemonSets(objs []*unstructured.Unstructured) []daemonSet {
	var out []daemonSet
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		c := containers[0].(map[string]any)
		var d daemonSet
		d.args, _, _ = unstructured.NestedStringSlice(c, "args")
		mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
		for _, m := range mounts {
			p, _ := m.(map[string]any)["mountPath"].(string)
			d.mounts = append(d.mounts, p)
		}
		out = append(out, d)
	}
	return out
}

// dynamicClient gives a client for any kind of object the API server
// knows, and the mapping from kinds to its resources.
func dynamicClient(t *testing.T) (dynamic.Interface, meta.RESTMapper) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	return dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
}

// dryRun creates objs in a server-side dry run (schema, defaults,
// validation) and counts them by kind.
func dryRun(t *testing.T, objs []*unstructured.Unstructured) map[string]int {
	t.Helper()
	ctx := context.Background()
	dyn, mapper := dynamicClient(t)
	kinds := map[string]int{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		kinds[gvk.Kind]++
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: %v", gvk.Kind, o.GetName(), err)
			continue
		}
		ri := dyn.Resource(m.Resource)
		var c dynamic.ResourceInterface = ri
		if o.GetNamespace() != "" {
			c = ri.Namespace(o.GetNamespace())
		}
		if _, err := c.Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
			t.Errorf("%s %s: %v", gvk.Kind, o.GetName(), err)
		}
	}
	return kinds
}

// checkNodeDaemonArgs: the node DaemonSet runs the node daemon with its
// device plugin and, with remote vGPUs served, flexgv serve beside it,
// whose command lines the built flexgv parses (every flag exists, every
// value reads).
func checkNodeDaemonArgs(t *testing.T, objs []*unstructured.Unstructured, serve bool) {
	t.Helper()
	want := []string{"daemon"}
	if serve {
		want = append(want, "serve")
	}
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if len(containers) != len(want) {
			t.Fatalf("DaemonSet %s has %d containers, want %v", o.GetName(), len(containers), want)
		}
		for i, c := range containers {
			args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
			if len(args) == 0 || args[0] != want[i] || (i == 0 && !slices.Contains(args, "--kubernetes")) {
				t.Fatalf("DaemonSet %s container %d runs flexgv %v, want %s", o.GetName(), i, args, want[i])
			}
			// $(NODE_NAME) and $(NODE_IP) are the kubelet's to expand; --help
			// stops after parsing.
			args = append(slices.Clone(args), "--help")
			for i, a := range args {
				args[i] = strings.NewReplacer("$(NODE_NAME)", "node-1", "$(NODE_IP)", "10.0.0.1").Replace(a)
			}
			if out, err := exec.Command(filepath.Join(build, "bin", "flexgv"), args...).CombinedOutput(); err != nil {
				t.Errorf("flexgv %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
}

// checkDashboard checks that objs hold the Grafana dashboard's ConfigMap,
// with the label Grafana's sidecar watches and a dashboard in JSON, or not.
func checkDashboard(t *testing.T, objs []*unstructured.Unstructured, want bool) {
	t.Helper()
	found := false
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" || o.GetLabels()["grafana_dashboard"] == "" {
			continue
		}
		found = true
		if o.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("dashboard ConfigMap labelled grafana_dashboard=%q, want \"1\"", o.GetLabels()["grafana_dashboard"])
		}
		data, _, _ := unstructured.NestedString(o.Object, "data", "flexgv.json")
		var dash struct {
			Panels []any `json:"panels"`
		}
		if err := json.Unmarshal([]byte(data), &dash); err != nil || len(dash.Panels) == 0 {
			t.Errorf("dashboard ConfigMap's flexgv.json: %v, %d panels", err, len(dash.Panels))
		}
	}
	if found != want {
		t.Errorf("a Grafana dashboard ConfigMap: %v, want %v", found, want)
	}
}
