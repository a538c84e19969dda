package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

func node(name string, gpus ...int64) *corev1.Node {
	inv := vgpu.Inventory{Slots: 2, ContextMiB: 100}
	for i, mib := range gpus {
		inv.GPUs = append(inv.GPUs, vgpu.GPU{UUID: name + "-gpu" + string(rune('0'+i)), Index: i, MemoryMiB: mib, Healthy: true})
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{vgpu.AnnotationInventory: inv.Encode()}}}
}

func pod(name string, mem string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			vgpu.ResourceVGPU: resource.MustParse("1"), vgpu.ResourceMemory: resource.MustParse(mem),
		}}}}},
	}
}

func post(t *testing.T, srv *httptest.Server, path string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func start(t *testing.T, objs ...any) (*Extender, *httptest.Server) {
	t.Helper()
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *corev1.Node:
			_, err = client.CoreV1().Nodes().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Pod:
			_, err = client.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *policyv1.PodDisruptionBudget:
			_, err = client.PolicyV1().PodDisruptionBudgets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	e := New(client, vgpu.Binpack, io.Discard)
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(srv.Close)
	return e, srv
}

func TestFilterCountsPlacedPods(t *testing.T) {
	// small's GPU has 1000 MiB; 600 MiB are held by a pod placed there.
	held := pod("held", "500")
	held.Spec.NodeName = "small"
	held.Annotations = map[string]string{vgpu.AnnotationGPUs: "small-gpu0"}
	plain := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}
	_, srv := start(t, node("small", 1000), node("big", 4000), plain, held)
	names := []string{"small", "big", "plain"}
	code, body := post(t, srv, "/filter", extenderv1.ExtenderArgs{Pod: pod("p", "400"), NodeNames: &names})
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(body, &res); code != http.StatusOK || err != nil {
		t.Fatalf("filter: %d %s", code, body)
	}
	if res.NodeNames == nil || strings.Join(*res.NodeNames, ",") != "big" {
		t.Errorf("filter kept %v, want big", res.NodeNames)
	}
	if want := "flexgv: no GPU with 400 MiB (+100 MiB context) free (small-gpu0 has 400 MiB, 100 percent compute)"; res.FailedNodes["small"] != want {
		t.Errorf("small: %q, want %q", res.FailedNodes["small"], want)
	}
	if !strings.Contains(res.FailedNodes["plain"], "node plain has no FlexGV device plugin") {
		t.Errorf("plain: %q", res.FailedNodes["plain"])
	}
}

func TestFilterPassesOtherPodsAndRefusesBadOnes(t *testing.T) {
	_, srv := start(t, node("n", 1000))
	names := []string{"n"}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	_, body := post(t, srv, "/filter", extenderv1.ExtenderArgs{Pod: plain, NodeNames: &names})
	var res extenderv1.ExtenderFilterResult
	json.Unmarshal(body, &res)
	if res.NodeNames == nil || len(*res.NodeNames) != 1 || res.Error != "" {
		t.Errorf("a pod without vGPUs: %s", body)
	}
	bad := pod("bad", "100")
	delete(bad.Spec.Containers[0].Resources.Limits, vgpu.ResourceVGPU)
	_, body = post(t, srv, "/filter", extenderv1.ExtenderArgs{Pod: bad, NodeNames: &names})
	res = extenderv1.ExtenderFilterResult{}
	json.Unmarshal(body, &res)
	if !strings.Contains(res.Error, "asks for flexgv.io/gpu-memory without flexgv.io/vgpu") {
		t.Errorf("a bad pod: %s", body)
	}
	if code, body := post(t, srv, "/filter", extenderv1.ExtenderArgs{Pod: pod("p", "1")}); !strings.Contains(string(body), "nodeCacheCapable: true") || code != http.StatusOK {
		t.Errorf("filter without node names: %d %s", code, body)
	}
	resp, err := http.Post(srv.URL+"/bind", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bind of bad JSON: %s", resp.Status)
	}
}

// Binding reserves: a second pod bound before the API server reports the
// first finds its GPU taken.
func TestBindReserves(t *testing.T) {
	a, b := pod("a", "600"), pod("b", "600")
	e, _ := start(t, node("n", 1000), a, b)
	if err := e.Bind(context.Background(), extenderv1.ExtenderBindingArgs{PodName: "a", PodNamespace: "default", PodUID: a.UID, Node: "n"}); err != nil {
		t.Fatal(err)
	}
	err := e.Bind(context.Background(), extenderv1.ExtenderBindingArgs{PodName: "b", PodNamespace: "default", PodUID: b.UID, Node: "n"})
	if err == nil || !strings.Contains(err.Error(), "n-gpu0 has 300 MiB") {
		t.Errorf("binding b onto a's GPU: %v", err)
	}
}

func placed(name, mem, gpu string, prio int32) *corev1.Pod {
	p := pod(name, mem)
	p.Spec.NodeName = "n"
	p.Spec.Priority = &prio
	p.Annotations = map[string]string{vgpu.AnnotationGPUs: gpu}
	p.Status.Phase = corev1.PodRunning
	return p
}

// Preemption evicts, on the GPU that needs the fewest evictions, pods of
// lower priority only, the lowest and largest first, whatever
// kube-scheduler proposed by the node's totals; a node where no eviction
// makes room is dropped.
func TestPreemptionPicksVictimsByGPU(t *testing.T) {
	// GPUs of 1000 MiB, contexts of 100: n-gpu0 holds a (400) and b (300),
	// 100 MiB free; n-gpu1 holds c (700) and d (100, of higher priority).
	_, srv := start(t, node("n", 1000, 1000), node("full", 1000),
		placed("a", "400", "n-gpu0", 1), placed("b", "300", "n-gpu0", 1), placed("c", "700", "n-gpu1", 1), placed("d", "100", "n-gpu1", 50))
	high := pod("high", "600")
	prio := int32(10)
	high.Spec.Priority = &prio
	args := extenderv1.ExtenderPreemptionArgs{Pod: high, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{
		"n":    {Pods: []*extenderv1.MetaPod{{UID: "uid-a"}}},
		"full": {Pods: []*extenderv1.MetaPod{{UID: "uid-x"}}},
	}}
	code, body := post(t, srv, "/preempt", args)
	var res extenderv1.ExtenderPreemptionResult
	if code != http.StatusOK || json.Unmarshal(body, &res) != nil {
		t.Fatalf("preempt: %d %s", code, body)
	}
	got := res.NodeNameToMetaVictims
	if len(got) != 1 || got["n"] == nil || len(got["n"].Pods) != 1 || got["n"].Pods[0].UID != "uid-c" {
		t.Errorf("victims %s, want c alone on n", body)
	}
	// Above d's priority nothing is evicted for a pod that needs d's room too.
	big := pod("big", "850")
	big.Spec.Priority = &prio
	args.Pod = big
	res = extenderv1.ExtenderPreemptionResult{}
	if code, body = post(t, srv, "/preempt", args); code != http.StatusOK || json.Unmarshal(body, &res) != nil || len(res.NodeNameToMetaVictims) != 1 {
		t.Fatalf("preempt for 850 MiB: %d %s", code, body)
	}
	if v := res.NodeNameToMetaVictims["n"]; v == nil || len(v.Pods) != 2 || v.Pods[0].UID != "uid-a" || v.Pods[1].UID != "uid-b" {
		t.Errorf("victims for 850 MiB %s, want a then b (n-gpu1 keeps d, of higher priority)", body)
	}
	low := pod("low", "600")
	args.Pod = low
	res = extenderv1.ExtenderPreemptionResult{}
	if code, body = post(t, srv, "/preempt", args); code != http.StatusOK || json.Unmarshal(body, &res) != nil || len(res.NodeNameToMetaVictims) != 0 {
		t.Errorf("a pod of priority 0 evicts nobody: %d %s", code, body)
	}
}

// A remote vGPU goes to a GPU server that is not cordoned: one being
// drained gets nothing new, however the policy likes it, and where only cordoned servers
// are left the filter says so.
func TestRemoteVGPUSkipsCordonedServers(t *testing.T) {
	server := func(name string, mib int64, cordoned bool) *corev1.Node {
		n := node(name, mib)
		inv, _, _ := vgpu.NodeInventory(n)
		inv.Remote = "tcp://" + name + ":7070"
		n.Annotations[vgpu.AnnotationInventory] = inv.Encode()
		n.Spec.Unschedulable = cordoned
		return n
	}
	remote := func(name string) *corev1.Pod {
		p := pod(name, "1")
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{vgpu.ResourceRemoteVGPU: resource.MustParse("1")}
		p.Annotations = map[string]string{vgpu.AnnotationRemoteMemory: "500"}
		return p
	}
	p := remote("p")
	e, _ := start(t, server("drained", 1000, true), server("busy", 4000, false), p, node("runner", 1000))
	if err := e.Bind(context.Background(), extenderv1.ExtenderBindingArgs{PodName: "p", PodNamespace: "default", PodUID: p.UID, Node: "runner"}); err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	placedOn := e.reserved[p.UID].node
	e.mu.Unlock()
	if placedOn != "busy" {
		t.Errorf("placed on %q, want busy (drained is cordoned)", placedOn)
	}
	_, only := start(t, server("drained", 4000, true), node("runner", 1000))
	names := []string{"runner"}
	_, body := post(t, only, "/filter", extenderv1.ExtenderArgs{Pod: remote("q"), NodeNames: &names})
	var res extenderv1.ExtenderFilterResult
	json.Unmarshal(body, &res)
	if want := "flexgv: none of 0 GPU servers (1 more cordoned) has a GPU with 500 MiB (+context) and 0 percent compute free for a remote vGPU"; res.FailedNodes["runner"] != want {
		t.Errorf("filter: %q, want %q", res.FailedNodes["runner"], want)
	}
}

// Preemption evicts, of pods alike, one a PodDisruptionBudget does not
// protect before one it does, whatever their size.
func TestPreemptionSparesPodsABudgetProtects(t *testing.T) {
	for _, budget := range []bool{false, true} {
		// GPU of 1200 MiB: a (450) and b (400) with their contexts leave
		// 150; either one evicted makes room for high (300 and its context).
		a, b := placed("a", "450", "n-gpu0", 1), placed("b", "400", "n-gpu0", 1)
		a.Labels = map[string]string{"app": "a"}
		objs := []any{node("n", 1200), a, b}
		if budget {
			objs = append(objs, &policyv1.PodDisruptionBudget{
				ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"},
				Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}},
				Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0},
			})
		}
		_, srv := start(t, objs...)
		high := pod("high", "300")
		prio := int32(10)
		high.Spec.Priority = &prio
		v := preempt(t, srv, high)
		want := "uid-a" // the largest first
		if budget {
			want = "uid-b"
		}
		if len(v) != 1 || v["n"] == nil || len(v["n"].Pods) != 1 || string(v["n"].Pods[0].UID) != want {
			t.Errorf("budget on a %v: victims %+v, want %s alone", budget, v["n"], want)
		}
	}
}
