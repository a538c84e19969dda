package k8s

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

const (
	gpuMiB = 16000
	ctxMiB = 500
	slots  = 4
)

// addNode creates a node labelled pool=pool with gpus GPUs as a device
// plugin publishes them: the inventory annotation and the capacity.
func addNode(t *testing.T, name, pool string, gpus int) vgpu.Inventory {
	t.Helper()
	ctx := context.Background()
	inv := vgpu.Inventory{Slots: slots, ContextMiB: ctxMiB}
	for i := range gpus {
		inv.GPUs = append(inv.GPUs, vgpu.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, MemoryMiB: gpuMiB, Healthy: true})
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{"pool": pool},
		Annotations: map[string]string{vgpu.AnnotationInventory: inv.Encode()},
	}}
	n, err := cp.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API server taints new nodes not-ready; a kubelet's first status
	// would lift it, no node controller runs to put it back.
	n.Spec.Taints = nil
	if n, err = cp.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	capacity := inv.Capacity()
	capacity[corev1.ResourceCPU] = resource.MustParse("64")
	capacity[corev1.ResourceMemory] = resource.MustParse("256Gi")
	capacity[corev1.ResourcePods] = resource.MustParse("500")
	capacity[vgpu.ResourceVGPU] = *resource.NewQuantity(int64(gpus*slots), resource.DecimalSI)
	n.Status = corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
	}
	if _, err := cp.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cp.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}) })
	return inv
}

// vgpuPod is a pod of one container asking for one vGPU of memMiB and
// computePct (0: none), kept to the nodes of pool.
func vgpuPod(ns, name, pool string, memMiB, computePct int64) *corev1.Pod {
	limits := corev1.ResourceList{
		vgpu.ResourceVGPU:   resource.MustParse("1"),
		vgpu.ResourceMemory: *resource.NewQuantity(memMiB, resource.DecimalSI),
	}
	if computePct > 0 {
		limits[vgpu.ResourceCompute] = *resource.NewQuantity(computePct, resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"pool": pool},
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Limits: limits},
			}},
		},
	}
}

// gpuLoad adds up what the bound pods of ns hold of each GPU, contexts
// included, and fails the test if any GPU holds more than it has.
func gpuLoad(t *testing.T, ns string, inv map[string]vgpu.Inventory) (map[string]vgpu.Use, []corev1.Pod) {
	t.Helper()
	pods, err := cp.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	load := map[string]vgpu.Use{}
	var pending []corev1.Pod
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			pending = append(pending, p)
			continue
		}
		gpus := vgpu.PodGPUs(&p)
		if len(gpus) != 1 {
			t.Fatalf("pod %s bound to %s with GPUs %q", p.Name, p.Spec.NodeName, gpus)
		}
		if !strings.HasPrefix(gpus[0], "GPU-"+p.Spec.NodeName+"-") {
			t.Fatalf("pod %s bound to %s but given GPU %s of another node", p.Name, p.Spec.NodeName, gpus[0])
		}
		r, _, err := vgpu.PodRequest(&p)
		if err != nil {
			t.Fatal(err)
		}
		u := load[gpus[0]]
		u.Add(r, inv[p.Spec.NodeName].ContextMiB)
		load[gpus[0]] = u
	}
	for g, u := range load {
		if u.MemoryMiB > gpuMiB || u.ComputePct > 100 || u.Pods > slots {
			t.Errorf("GPU %s oversubscribed: %d pods, %d MiB of %d, %d%% compute", g, u.Pods, u.MemoryMiB, gpuMiB, u.ComputePct)
		}
	}
	return load, pending
}

func TestPodsFillGPUsExactly(t *testing.T) {
	ns := namespace(t, "fill")
	inv := map[string]vgpu.Inventory{
		"fill-1": addNode(t, "fill-1", "fill", 2),
		"fill-2": addNode(t, "fill-2", "fill", 2),
	}
	ctx := context.Background()
	// Per GPU: 9500+500 and 5500+500 MiB make 16000; 60% and 40% make 100%.
	// The large ones first, each on its own GPU since two do not fit one;
	// binpack then puts each small one next to a large one.
	for _, size := range []struct {
		name         string
		mem, compute int64
	}{{"large", 9500, 60}, {"small", 5500, 40}} {
		for i := range 4 {
			p := vgpuPod(ns, fmt.Sprintf("%s-%d", size.name, i), "fill", size.mem, size.compute)
			if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 60*time.Second, "the "+size.name+" pods bound", func() (bool, error) {
			_, pending := gpuLoad(t, ns, inv)
			return len(pending) == 0, nil
		})
	}
	load, _ := gpuLoad(t, ns, inv)
	if len(load) != 4 {
		t.Fatalf("pods on %d GPUs, want 4: %v", len(load), load)
	}
	for g, u := range load {
		if u.MemoryMiB != gpuMiB || u.ComputePct != 100 || u.Pods != 2 {
			t.Errorf("GPU %s holds %+v, want exactly full", g, u)
		}
	}
	// The nodes' totals have room (100 MiB more than 60000 of 64000, no
	// compute asked), no GPU has: the next pod stays Pending and says why.
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, vgpuPod(ns, "one-more", "fill", 100, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var msg string
	eventually(t, 30*time.Second, "a FailedScheduling event for one-more", func() (bool, error) {
		evs, err := cp.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "one-more").String()})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedScheduling" {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("event: %s", msg)
	want := "flexgv: no GPU with 100 MiB (+500 MiB context) free (GPU-fill-1-0 has 0 MiB, 0 percent compute; GPU-fill-1-1 has 0 MiB, 0 percent compute)"
	if !strings.Contains(msg, want) {
		t.Errorf("FailedScheduling event %q does not say %q", msg, want)
	}
	p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, "one-more", metav1.GetOptions{})
	if err != nil || p.Spec.NodeName != "" {
		t.Errorf("one-more: node %q, %v", p.Spec.NodeName, err)
	}
}

func TestConcurrentPodsNeverOversubscribe(t *testing.T) {
	ns := namespace(t, "burst")
	inv := map[string]vgpu.Inventory{}
	for i := range 3 {
		name := fmt.Sprintf("burst-%d", i)
		inv[name] = addNode(t, name, "burst", 2)
	}
	ctx := context.Background()
	// 3500+500 MiB and 25%: four fill a GPU, the six GPUs take 24 of 50.
	const total, fit = 50, 24
	events := watchPods(t, ns)
	created := make([]time.Time, total)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range total {
		wg.Go(func() {
			created[i] = time.Now()
			if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, vgpuPod(ns, fmt.Sprintf("p-%02d", i), "burst", 3500, 25), metav1.CreateOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Time from each pod's creation to its binding, as a watcher sees it.
	var latencies []time.Duration
	var last time.Time
	timeout := time.After(90 * time.Second)
	for len(latencies) < fit {
		select {
		case ev, open := <-events:
			if !open {
				t.Fatalf("the API server ended the pods watch after %d bindings", len(latencies))
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type != watch.Modified || p.Spec.NodeName == "" {
				continue
			}
			var i int
			fmt.Sscanf(p.Name, "p-%d", &i)
			if !created[i].IsZero() {
				last = time.Now()
				latencies = append(latencies, last.Sub(created[i]))
				created[i] = time.Time{}
			}
		case <-timeout:
			t.Fatalf("%d of %d pods bound after 90s", len(latencies), fit)
		}
	}
	// Some more time for a wrong binding to show.
	time.Sleep(3 * time.Second)
	load, pending := gpuLoad(t, ns, inv)
	bound := total - len(pending)
	if bound != fit {
		t.Errorf("%d pods bound, want %d", bound, fit)
	}
	for g, u := range load {
		if u.Pods != 4 {
			t.Errorf("GPU %s holds %d pods, want 4", g, u.Pods)
		}
	}
	slices.Sort(latencies)
	t.Logf("%d pods bound of %d submitted at once in %s: %.1f pods/s; creation to binding: median %s, max %s",
		fit, total, last.Sub(start).Round(time.Millisecond), float64(fit)/last.Sub(start).Seconds(),
		latencies[len(latencies)/2].Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond))
}
