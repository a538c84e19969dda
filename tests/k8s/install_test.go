package k8s

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

// chartNS makes the chart's namespace, if no test has yet.
func chartNS(t *testing.T) {
	t.Helper()
	_, err := cp.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNamespace,
		// As the docs label it: the node daemon's pods need hostPath volumes.
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// apply creates or updates those of objs whose kind is in kinds, as helm
// install would, and removes them when the test ends.
func apply(t *testing.T, objs []*unstructured.Unstructured, kinds ...string) {
	t.Helper()
	ctx := context.Background()
	dyn, mapper := dynamicClient(t)
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if !slices.Contains(kinds, gvk.Kind) {
			continue
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		var c dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if o.GetNamespace() != "" {
			c = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := c.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "flexgv-test", Force: true}); err != nil {
			t.Fatalf("%s %s: %v", gvk.Kind, o.GetName(), err)
		}
		name := o.GetName()
		t.Cleanup(func() { c.Delete(ctx, name, metav1.DeleteOptions{}) })
	}
}

var rbacKinds = []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// checkPods: every container of the chart's workloads has requests and a
// memory limit; all but the node daemon's run as non-root, read-only,
// with no capability.
func checkPods(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
			continue
		}
		spec, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		nonRoot, _, _ := unstructured.NestedBool(spec, "securityContext", "runAsNonRoot")
		containers, _, _ := unstructured.NestedSlice(spec, "containers")
		for _, c := range containers {
			c := c.(map[string]any)
			what := o.GetName() + "/" + c["name"].(string)
			if _, ok, _ := unstructured.NestedString(c, "resources", "limits", "memory"); !ok {
				t.Errorf("%s has no memory limit", what)
			}
			if _, ok, _ := unstructured.NestedMap(c, "resources", "requests"); !ok {
				t.Errorf("%s has no requests", what)
			}
			if o.GetKind() == "DaemonSet" {
				continue
			}
			ro, _, _ := unstructured.NestedBool(c, "securityContext", "readOnlyRootFilesystem")
			drop, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "drop")
			if !nonRoot || !ro || !slices.Contains(drop, "ALL") {
				t.Errorf("%s: runAsNonRoot %v, readOnlyRootFilesystem %v, capabilities dropped %v", what, nonRoot, ro, drop)
			}
		}
	}
}

// kubeconfigFor writes a kubeconfig of the chart's service account sa, by
// a token the API server issues for it.
func kubeconfigFor(t *testing.T, sa string) string {
	t.Helper()
	exp := int64(3600)
	tok, err := cp.Client.CoreV1().ServiceAccounts(chartNamespace).CreateToken(context.Background(), sa,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	cfg := strings.Join([]string{
		"apiVersion: v1", "kind: Config",
		"clusters:", "- name: test", "  cluster:", "    server: " + cp.URL, "    insecure-skip-tls-verify: true",
		"users:", "- name: sa", "  user:", "    token: " + tok.Status.Token,
		"contexts:", "- name: test", "  context:", "    cluster: test", "    user: sa",
		"current-context: test", "",
	}, "\n")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The chart's kube-scheduler, run as the chart's service account with the
// chart's configuration (leader election on), becomes leader and, through
// the extender run as that account too, binds a vGPU pod.
func TestChartSchedulerLeadsAsItsServiceAccount(t *testing.T) {
	objs, err := renderChart(nil)
	if err != nil {
		t.Fatal(err)
	}
	chartNS(t)
	apply(t, objs, rbacKinds...)
	kc := kubeconfigFor(t, "flexgv-scheduler")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	startFlexGV(t, nil, "scheduler", "--listen", addr, "--kubeconfig", kc, "--policy", "binpack")
	eventually(t, 10*time.Second, "flexgv scheduler answering", func() (bool, error) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil, err
	})
	var cfg map[string]any
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == "flexgv-scheduler" {
			text, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
			if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cfg == nil {
		t.Fatal("the chart has no scheduler ConfigMap")
	}
	if le, _ := cfg["leaderElection"].(map[string]any); le["leaderElect"] != true {
		t.Fatalf("the chart's kube-scheduler elects no leader: %v", cfg["leaderElection"])
	}
	cfg["extenders"].([]any)[0].(map[string]any)["urlPrefix"] = "http://" + addr
	cfg["clientConnection"] = map[string]any{"kubeconfig": kc}
	text, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := cp.StartSchedulerConfig("kube-scheduler-chart", string(text))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	addNode(t, "chart-sched", "chart-sched", 1)
	ns := namespace(t, "chart-sched")
	pod := vgpuPod(ns, "p", "chart-sched", 1024, 0)
	pod.Spec.SchedulerName = "flexgv-scheduler"
	ctx := context.Background()
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
		if err == nil && p.Spec.NodeName == "chart-sched" && len(vgpu.PodGPUs(p)) == 1 {
			break
		}
		if time.Now().After(deadline) {
			log := cp.Log("kube-scheduler-chart")
			var lines []string
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(l, "forbidden") || strings.Contains(l, "leader") {
					lines = append(lines, l)
				}
			}
			t.Fatalf("pod not bound by the chart's scheduler after 60s (%v); its log on leases and refusals:\n%s", err, strings.Join(lines[max(0, len(lines)-10):], "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// With remote vGPUs on, the node daemon's account may handle Secrets of
// the chart's namespace, and of no other: the API server says so.
func TestChartNodeReadsSecretsOnlyInItsNamespace(t *testing.T) {
	objs, err := renderChart(map[string]any{"remote": map[string]any{"port": 7070, "slots": 2}})
	if err != nil {
		t.Fatal(err)
	}
	chartNS(t)
	apply(t, objs, rbacKinds...)
	user := "system:serviceaccount:" + chartNamespace + ":flexgv-node"
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + chartNamespace, "system:authenticated"}
	for _, tc := range []struct {
		ns, verb string
		allowed  bool
	}{
		{chartNamespace, "get", true}, {chartNamespace, "list", true}, {chartNamespace, "create", true}, {chartNamespace, "delete", true},
		{"default", "get", false}, {"default", "list", false}, {"kube-system", "get", false}, {"", "list", false},
	} {
		sar, err := cp.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{
			Spec: authzv1.SubjectAccessReviewSpec{User: user, Groups: groups,
				ResourceAttributes: &authzv1.ResourceAttributes{Namespace: tc.ns, Verb: tc.verb, Resource: "secrets"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.allowed {
			t.Errorf("the node daemon may %s secrets in namespace %q: %v, want %v (%s)", tc.verb, tc.ns, sar.Status.Allowed, tc.allowed, sar.Status.Reason)
		}
	}
}

// The webhook fails closed: with it down, a pod of an ordinary namespace
// is refused; pods of the system's namespaces and the chart's are not.
func TestChartWebhookFailsClosedButNotForSystemPods(t *testing.T) {
	objs, err := renderChart(map[string]any{"webhook": map[string]any{"excludeNamespaces": []any{"ops"}}})
	if err != nil {
		t.Fatal(err)
	}
	chartNS(t)
	// The configurations alone: their Service has no pod behind it.
	apply(t, objs, "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
	ctx := context.Background()
	user := namespace(t, "webhook-down")
	ops := namespace(t, "ops")
	pause := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	}
	zero := int64(0)
	// The API server takes up new webhook configurations within moments.
	eventually(t, 10*time.Second, "a pod of namespace "+user+" refused while the webhook is down", func() (bool, error) {
		_, err := cp.Client.CoreV1().Pods(user).Create(ctx, pause(user, "refused"), metav1.CreateOptions{})
		if err == nil {
			cp.Client.CoreV1().Pods(user).Delete(ctx, "refused", metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		return err != nil && strings.Contains(err.Error(), "failed calling webhook"), err
	})
	for _, ns := range []string{"kube-system", chartNamespace, ops} {
		if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, pause(ns, "system-pod"), metav1.CreateOptions{}); err != nil {
			t.Errorf("a pod of namespace %s while the webhook is down: %v", ns, err)
			continue
		}
		cp.Client.CoreV1().Pods(ns).Delete(ctx, "system-pod", metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
}

// webhookTLS is what a render gives the webhook: the caBundle of its two
// configurations and its Secret's certificate.
func webhookTLS(t *testing.T, objs []*unstructured.Unstructured) (bundles []string, secret *unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			b, _, _ := unstructured.NestedString(hooks[0].(map[string]any), "clientConfig", "caBundle")
			bundles = append(bundles, b)
		case "Secret":
			secret = o
		}
	}
	if len(bundles) != 2 || secret == nil {
		t.Fatalf("webhook TLS of the render: %d caBundles, Secret %v", len(bundles), secret != nil)
	}
	return bundles, secret
}

// A second render (helm upgrade) against a cluster holding the first's
// Secret keeps its CA and certificate; the caBundle is the CA that signed
// the certificate served.
func TestChartKeepsWebhookCertificateOnUpgrade(t *testing.T) {
	chartNS(t)
	caps := chartutil.DefaultCapabilities.Copy()
	first, err := renderChartFor(nil, caps, true)
	if err != nil {
		t.Fatal(err)
	}
	bundles, secret := webhookTLS(t, first)
	apply(t, first, "Secret")
	for i := range 2 {
		again, err := renderChartFor(nil, caps, true)
		if err != nil {
			t.Fatal(err)
		}
		b2, s2 := webhookTLS(t, again)
		crt, _, _ := unstructured.NestedString(secret.Object, "data", "tls.crt")
		crt2, _, _ := unstructured.NestedString(s2.Object, "data", "tls.crt")
		if b2[0] != bundles[0] || b2[1] != bundles[0] || crt2 != crt {
			t.Fatalf("render %d after install: the caBundle or certificate changed", i+2)
		}
	}
	ca, _ := base64.StdEncoding.DecodeString(bundles[0])
	crt, _, _ := unstructured.NestedString(secret.Object, "data", "tls.crt")
	crtPEM, _ := base64.StdEncoding.DecodeString(crt)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("caBundle is no PEM certificate")
	}
	block, _ := pem.Decode(crtPEM)
	if block == nil {
		t.Fatal("tls.crt is no PEM")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("flexgv-webhook.%s.svc", chartNamespace)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
		t.Errorf("the served certificate against the caBundle for %s: %v", host, err)
	}
	// With cert-manager: its Certificate, and the CA injected by it.
	cm, err := renderChart(map[string]any{"webhook": map[string]any{"certManager": map[string]any{"enabled": true}}})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range cm {
		kinds[o.GetKind()]++
		if strings.HasSuffix(o.GetKind(), "WebhookConfiguration") && o.GetAnnotations()["cert-manager.io/inject-ca-from"] != chartNamespace+"/flexgv-webhook" {
			t.Errorf("%s without cert-manager's CA injection: %v", o.GetKind(), o.GetAnnotations())
		}
	}
	if kinds["Certificate"] != 1 || kinds["Issuer"] != 1 || kinds["Secret"] != 0 {
		t.Errorf("with cert-manager the chart has %v; want a Certificate, an Issuer and no Secret of its own", kinds)
	}
}

// kube-scheduler's image is of the cluster's version unless the values
// name one.
func TestChartSchedulerImageFollowsTheCluster(t *testing.T) {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: "v1.36.4+k3s1", Major: "1", Minor: "36"}
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{nil, "registry.k8s.io/kube-scheduler:v1.36.4"},
		{map[string]any{"scheduler": map[string]any{"image": map[string]any{"tag": "v1.36.9"}}}, "registry.k8s.io/kube-scheduler:v1.36.9"},
		{map[string]any{"scheduler": map[string]any{"image": map[string]any{"repository": "mirror.example/kube-scheduler"}}}, "mirror.example/kube-scheduler:v1.36.4"},
	} {
		objs, err := renderChartFor(tc.values, caps, false)
		if err != nil {
			t.Fatal(err)
		}
		var image string
		for _, o := range objs {
			if o.GetKind() == "Deployment" && o.GetName() == "flexgv-scheduler" {
				containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				image, _, _ = unstructured.NestedString(containers[0].(map[string]any), "image")
			}
		}
		if image != tc.want {
			t.Errorf("values %v on a v1.36.4+k3s1 cluster: kube-scheduler image %q, want %q", tc.values, image, tc.want)
		}
	}
}

// values.schema.json refuses values of the wrong type or out of range,
// naming the value.
func TestChartSchemaRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		want   []string
	}{
		{map[string]any{"node": map[string]any{"slots": "four"}}, []string{"/node/slots", "integer"}},
		{map[string]any{"node": map[string]any{"slots": 0}}, []string{"/node/slots", "minimum"}},
		{map[string]any{"webhook": map[string]any{"failurePolicy": "Sometimes"}}, []string{"/webhook/failurePolicy", "Fail"}},
		{map[string]any{"scheduler": map[string]any{"kubeSchedulerImage": "registry.k8s.io/kube-scheduler:v1.37.2"}}, []string{"kubeSchedulerImage"}},
		{map[string]any{"remote": map[string]any{"port": 70000}}, []string{"/remote/port", "maximum"}},
	} {
		_, err := renderChart(tc.values)
		if err == nil {
			t.Errorf("values %v rendered", tc.values)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("values %v: %v\nwant it to say %q", tc.values, err, w)
			}
		}
	}
	if _, err := renderChart(map[string]any{"node": map[string]any{"slots": 8, "contextMemory": "1.5GiB"}}); err != nil {
		t.Errorf("good values refused: %v", err)
	}
}

// The chart's pods under Pod Security: the webhook's and the scheduler's
// meet "restricted"; the node daemon's needs "privileged" (the kubelet's
// sockets, the shim and the tenant files are hostPath volumes, which
// "baseline" forbids), the level the docs label the release's namespace
// with. Created as pods (server-side dry run) from the workloads'
// templates, where Pod Security enforces.
func TestChartPodsMeetPodSecurity(t *testing.T) {
	objs, err := renderChart(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, level := range []string{"privileged", "baseline", "restricted"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "psa-" + level, Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}
		if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	// The node daemon's runtime class, as NVIDIA's container toolkit makes it.
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "nvidia"}, Handler: "nvidia"}
	if _, err := cp.Client.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pods := 0
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
			continue
		}
		spec, _, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		var pod corev1.Pod
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"spec": spec}, &pod); err != nil {
			t.Fatal(err)
		}
		pod.Name = o.GetName()
		pods++
		for _, level := range []string{"privileged", "baseline", "restricted"} {
			pod.Namespace = "psa-" + level
			_, err := cp.Client.CoreV1().Pods(pod.Namespace).Create(ctx, &pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			allowed := level == "privileged" || o.GetKind() == "Deployment"
			if allowed && err != nil {
				t.Errorf("%s %s refused under %s: %v", o.GetKind(), o.GetName(), level, err)
			}
			if !allowed && (err == nil || !strings.Contains(err.Error(), "hostPath")) {
				t.Errorf("%s %s under %s: %v, want refused for its hostPath volumes", o.GetKind(), o.GetName(), level, err)
			}
		}
	}
	if pods != 3 {
		t.Errorf("%d workloads in the chart, want the node daemon, the scheduler and the webhook", pods)
	}
}
