package vgpu

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(annotations map[string]string, limits ...map[corev1.ResourceName]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: annotations}}
	for i, l := range limits {
		c := corev1.Container{Name: "c" + string(rune('0'+i)), Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}}}
		for n, v := range l {
			c.Resources.Limits[n] = resource.MustParse(v)
		}
		p.Spec.Containers = append(p.Spec.Containers, c)
	}
	return p
}

func TestPodRequest(t *testing.T) {
	r, ok, err := PodRequest(pod(map[string]string{AnnotationPriority: "high"},
		map[corev1.ResourceName]string{corev1.ResourceCPU: "1"},
		map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "10240", ResourceCompute: "30"}))
	if err != nil || !ok {
		t.Fatalf("PodRequest: %v %v", ok, err)
	}
	want := Request{Container: "c1", Count: 1, MemoryMiB: 10240, ComputePct: 30, Priority: High}
	if r != want {
		t.Errorf("PodRequest = %+v, want %+v", r, want)
	}
	if _, ok, err := PodRequest(pod(nil, map[corev1.ResourceName]string{corev1.ResourceCPU: "1"})); ok || err != nil {
		t.Errorf("a pod without vGPUs: ok %v err %v", ok, err)
	}
	if r, _, err := PodRequest(pod(map[string]string{AnnotationPriority: "7"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"})); err != nil || r.Priority != "7" {
		t.Errorf("priority 7: %+v %v", r, err)
	}
	r, _, _ = PodRequest(pod(nil, map[corev1.ResourceName]string{ResourceVGPU: "2", ResourceMemory: "100"}))
	if r.Priority != Normal || r.ComputePct != 0 || r.ComputeMax != 0 || r.Count != 2 {
		t.Errorf("defaults: %+v", r)
	}
	r, _, err = PodRequest(pod(map[string]string{AnnotationComputeMax: "40"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1", ResourceCompute: "40"}))
	if err != nil || r.ComputeMax != 40 || r.ComputePct != 40 {
		t.Errorf("a cap of 40%% over a share of 40%%: %+v %v", r, err)
	}
	r, _, err = PodRequest(pod(map[string]string{AnnotationSM: "25"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}))
	if err != nil || r.SM != 25 {
		t.Errorf("a quarter of the SMs: %+v %v", r, err)
	}
	for _, v := range []string{"suspend", "evict"} {
		p := pod(map[string]string{AnnotationPreemption: v}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"})
		if _, _, err := PodRequest(p); err != nil || Suspendable(p) != (v == "suspend") {
			t.Errorf("preemption %s: %v, suspendable %v", v, err, Suspendable(p))
		}
		// Once its node failed to suspend it, it is evicted as any pod.
		p.Status.Conditions = []corev1.PodCondition{{Type: ConditionSuspended, Status: corev1.ConditionFalse, Reason: ReasonSuspendFailed}}
		if Suspendable(p) {
			t.Errorf("preemption %s: suspendable after its node failed to suspend it", v)
		}
	}
}

func TestPodRequestRefuses(t *testing.T) {
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod(nil, map[corev1.ResourceName]string{ResourceMemory: "1024"}),
			"container c0 asks for flexgv.io/gpu-memory without flexgv.io/vgpu; add flexgv.io/vgpu: 1"},
		{pod(nil, map[corev1.ResourceName]string{ResourceCompute: "20"}),
			"asks for flexgv.io/gpu-compute without flexgv.io/vgpu"},
		{pod(nil, map[corev1.ResourceName]string{ResourceVGPU: "1"}),
			"asks for flexgv.io/vgpu without flexgv.io/gpu-memory"},
		{pod(nil, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1024", ResourceCompute: "150"}),
			"flexgv.io/gpu-compute 150 is not a share of one GPU; give a percentage from 1 to 100"},
		{pod(nil, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1024", ResourceCompute: "0"}),
			"flexgv.io/gpu-compute 0 is not a share"},
		// Its sum with the context would overflow and fit any GPU.
		{pod(nil, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "8e18"}),
			"container c0: flexgv.io/gpu-memory 8000000000000000000 MiB is more than any GPU has"},
		{pod(map[string]string{AnnotationPriority: "urgent"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}),
			`flexgv.io/priority "urgent" is not a priority; use low, normal, high or a number from 0 to 9 (higher runs first)`},
		{pod(map[string]string{AnnotationPriority: "10"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}),
			`flexgv.io/priority "10" is not a priority`},
		{pod(map[string]string{AnnotationPriority: "high"}, map[corev1.ResourceName]string{corev1.ResourceCPU: "1"}),
			"flexgv.io/priority is set but no container asks for flexgv.io/vgpu"},
		{pod(nil, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}),
			"containers c0 and c1 both ask"},
		{pod(nil, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1500m"}),
			"flexgv.io/gpu-memory 1500m is not a whole number"},
		{pod(map[string]string{AnnotationComputeMax: "0"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}),
			`flexgv.io/gpu-compute-max "0": give a percentage from 1 to 100 (per vGPU)`},
		{pod(map[string]string{AnnotationComputeMax: "30%"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}),
			`flexgv.io/gpu-compute-max "30%": give a percentage`},
		{pod(map[string]string{AnnotationComputeMax: "101"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}),
			`flexgv.io/gpu-compute-max "101"`},
		{pod(map[string]string{AnnotationComputeMax: "30"}, map[corev1.ResourceName]string{corev1.ResourceCPU: "1"}),
			"flexgv.io/gpu-compute-max is set but no container asks for flexgv.io/vgpu"},
		{pod(map[string]string{AnnotationComputeMax: "20"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1", ResourceCompute: "30"}),
			"flexgv.io/gpu-compute 30 is above the cap flexgv.io/gpu-compute-max 20"},
		{pod(map[string]string{AnnotationSM: "0"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}),
			`flexgv.io/gpu-sm "0": give a percentage from 1 to 100 (per vGPU)`},
		{pod(map[string]string{AnnotationSM: "50%"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}),
			`flexgv.io/gpu-sm "50%": give a percentage`},
		{pod(map[string]string{AnnotationSM: "101"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}),
			`flexgv.io/gpu-sm "101"`},
		{pod(map[string]string{AnnotationSM: "50"}, map[corev1.ResourceName]string{corev1.ResourceCPU: "1"}),
			"flexgv.io/gpu-sm is set but no container asks for flexgv.io/vgpu"},
		{pod(map[string]string{AnnotationSM: "50", AnnotationRemoteMemory: "1024"}, map[corev1.ResourceName]string{ResourceRemoteVGPU: "1"}),
			"flexgv.io/gpu-sm is for the node's own GPUs"},
		{pod(map[string]string{AnnotationPreemption: "pause"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}),
			`flexgv.io/preemption "pause": want suspend or evict`},
		{pod(map[string]string{AnnotationPreemption: "suspend"}, map[corev1.ResourceName]string{corev1.ResourceCPU: "1"}),
			"flexgv.io/preemption is set but no container asks for flexgv.io/vgpu"},
		{pod(map[string]string{AnnotationPreemption: "suspend", AnnotationRemoteMemory: "1024"}, map[corev1.ResourceName]string{ResourceRemoteVGPU: "1"}),
			"flexgv.io/preemption suspend: a remote vGPU runs on its server"},
		{pod(map[string]string{AnnotationPreemption: "suspend", AnnotationSM: "50"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"}),
			"flexgv.io/preemption suspend: a pod under the node's MPS"},
	} {
		_, _, err := PodRequest(tc.pod)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PodRequest(%v) = %v, want %q", tc.pod.Spec.Containers[0].Resources.Limits, err, tc.want)
		}
	}
}

func inventory() Inventory {
	return Inventory{Slots: 4, ContextMiB: 500, GPUs: []GPU{
		{UUID: "GPU-a", MemoryMiB: 16000, Healthy: true},
		{UUID: "GPU-b", MemoryMiB: 16000, Healthy: true},
	}}
}

func TestChooseCountsContextAndCompute(t *testing.T) {
	inv := inventory()
	used := map[string]Use{}
	r := Request{Count: 1, MemoryMiB: 7500, ComputePct: 40}
	// Two pods of 7500 MiB + 500 MiB context fill a 16000 MiB GPU exactly.
	for i := range 4 {
		uuids, _, err := Choose(inv, used, r, Binpack)
		if err != nil {
			t.Fatalf("pod %d: %v", i, err)
		}
		u := used[uuids[0]]
		u.Add(r, inv.ContextMiB)
		used[uuids[0]] = u
	}
	if used["GPU-a"].MemoryMiB != 16000 || used["GPU-b"].MemoryMiB != 16000 {
		t.Fatalf("not filled exactly: %+v", used)
	}
	_, _, err := Choose(inv, used, Request{Count: 1, MemoryMiB: 1}, Binpack)
	if !errors.Is(err, ErrNoRoom) || !strings.Contains(err.Error(), "flexgv: no GPU with 1 MiB (+500 MiB context) free (GPU-a has 0 MiB, 20 percent compute; GPU-b has 0 MiB, 20 percent compute)") {
		t.Errorf("full GPUs: %v", err)
	}
	// Memory left but not compute.
	used = map[string]Use{"GPU-a": {Pods: 1, MemoryMiB: 1000, ComputePct: 80}, "GPU-b": {Pods: 1, MemoryMiB: 1000, ComputePct: 90}}
	if _, _, err := Choose(inv, used, Request{Count: 1, MemoryMiB: 100, ComputePct: 30}, Binpack); err == nil {
		t.Error("placed 30% on GPUs with 20% and 10% free")
	}
	// Slots.
	used = map[string]Use{"GPU-a": {Pods: 4}, "GPU-b": {Pods: 4}}
	if _, _, err := Choose(inv, used, Request{Count: 1, MemoryMiB: 1}, Binpack); err == nil || !strings.Contains(err.Error(), "all 4 vGPUs taken") {
		t.Errorf("slots: %v", err)
	}
}

func TestChoosePolicy(t *testing.T) {
	inv := inventory()
	used := map[string]Use{"GPU-a": {Pods: 1, MemoryMiB: 8000, ComputePct: 50}}
	r := Request{Count: 1, MemoryMiB: 1000, ComputePct: 10}
	if u, _, _ := Choose(inv, used, r, Binpack); !slices.Equal(u, []string{"GPU-a"}) {
		t.Errorf("binpack chose %v", u)
	}
	if u, _, _ := Choose(inv, used, r, Spread); !slices.Equal(u, []string{"GPU-b"}) {
		t.Errorf("spread chose %v", u)
	}
	// The fuller node scores higher under binpack, lower under spread
	// (which looks at its emptiest GPU).
	_, fullB, _ := Choose(inv, used, r, Binpack)
	_, emptyB, _ := Choose(inv, nil, r, Binpack)
	both := map[string]Use{"GPU-a": used["GPU-a"], "GPU-b": used["GPU-a"]}
	_, fullS, _ := Choose(inv, both, r, Spread)
	_, emptyS, _ := Choose(inv, nil, r, Spread)
	if !(fullB > emptyB) || !(fullS < emptyS) {
		t.Errorf("scores: binpack full %v empty %v, spread full %v empty %v", fullB, emptyB, fullS, emptyS)
	}
	// Two vGPUs go on two GPUs.
	if u, _, err := Choose(inv, nil, Request{Count: 2, MemoryMiB: 100}, Binpack); err != nil || len(u) != 2 || u[0] == u[1] {
		t.Errorf("two vGPUs: %v %v", u, err)
	}
	if _, _, err := Choose(inv, nil, Request{Count: 3, MemoryMiB: 100}, Binpack); err == nil || !strings.Contains(err.Error(), "no 3 GPUs with") {
		t.Errorf("three vGPUs on two GPUs: %v", err)
	}
}

func TestChooseSkipsUnhealthy(t *testing.T) {
	inv := inventory()
	inv.GPUs[0].Healthy = false
	u, _, err := Choose(inv, nil, Request{Count: 1, MemoryMiB: 100}, Binpack)
	if err != nil || u[0] != "GPU-b" {
		t.Errorf("chose %v, %v", u, err)
	}
	inv.GPUs[1].Healthy = false
	if _, _, err := Choose(inv, nil, Request{Count: 1, MemoryMiB: 100}, Binpack); err == nil || !strings.Contains(err.Error(), "GPU-a unhealthy; GPU-b unhealthy") {
		t.Errorf("unhealthy: %v", err)
	}
	if c := inv.Capacity()[ResourceCompute]; c.Value() != 0 {
		t.Errorf("capacity of unhealthy GPUs: %v", c.String())
	}
}

// A pod that asks for part of the SMs fits only a node that offers its MPS
// to pods.
func TestChooseNeedsMPSForPartOfTheSMs(t *testing.T) {
	inv := inventory()
	r := Request{Count: 1, MemoryMiB: 100, SM: 25}
	if _, _, err := Choose(inv, nil, r, Binpack); !errors.Is(err, ErrNoRoom) || !strings.Contains(err.Error(), "the node offers pods no MPS") {
		t.Errorf("a node without MPS for pods: %v", err)
	}
	inv.MPS = true
	back, _, _ := NodeInventory(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationInventory: inv.Encode()}}})
	if u, _, err := Choose(back, nil, r, Binpack); err != nil || len(u) != 1 {
		t.Errorf("a node with MPS for pods, through its annotation: %v, %v", u, err)
	}
}

func TestNodeInventory(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{AnnotationInventory: inventory().Encode()}}}
	inv, ok, err := NodeInventory(n)
	if err != nil || !ok || len(inv.GPUs) != 2 || inv.ContextMiB != 500 {
		t.Fatalf("NodeInventory: %+v %v %v", inv, ok, err)
	}
	for _, bad := range []string{"{",
		`{"slots":4,"contextMiB":500,"gpus":[{"uuid":"GPU-a","memoryMiB":100},{"uuid":"GPU-a","memoryMiB":100}]}`,
		`{"slots":4,"contextMiB":500,"gpus":[{"uuid":"GPU-a","memoryMiB":-5}]}`,
		`{"slots":4,"contextMiB":500,"gpus":[{"uuid":"","memoryMiB":100}]}`,
		`{"slots":4,"contextMiB":-1,"gpus":[]}`,
		`{"slots":0,"gpus":[]}`,
	} {
		n.Annotations[AnnotationInventory] = bad
		if _, _, err := NodeInventory(n); err == nil {
			t.Errorf("inventory %s read", bad)
		}
	}
	if _, err := ParsePolicy("pack"); err == nil {
		t.Error("policy pack accepted")
	}
}

// A remote vGPU: one per container, its memory (and share) in annotations,
// no local vGPU resources beside it.
func TestRemoteRequest(t *testing.T) {
	r, ok, err := PodRequest(pod(map[string]string{AnnotationRemoteMemory: "1024", AnnotationRemoteCompute: "30", AnnotationPriority: "high"},
		map[corev1.ResourceName]string{ResourceRemoteVGPU: "1"}))
	want := Request{Container: "c0", Count: 1, MemoryMiB: 1024, ComputePct: 30, Priority: High, Remote: true}
	if err != nil || !ok || r != want {
		t.Errorf("PodRequest = %+v %v %v, want %+v", r, ok, err, want)
	}
	for _, c := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod(nil, map[corev1.ResourceName]string{ResourceRemoteVGPU: "1"}), "without flexgv.io/remote-gpu-memory"},
		{pod(map[string]string{AnnotationRemoteMemory: "1024"}, map[corev1.ResourceName]string{ResourceRemoteVGPU: "2"}),
			"flexgv.io/remote-vgpu 2: one remote vGPU per container"},
		{pod(map[string]string{AnnotationRemoteMemory: "1024"}, map[corev1.ResourceName]string{ResourceRemoteVGPU: "1", ResourceMemory: "1024"}),
			"a remote vGPU's memory and share are the annotations"},
		{pod(map[string]string{AnnotationRemoteMemory: "lots"}, map[corev1.ResourceName]string{ResourceRemoteVGPU: "1"}),
			`flexgv.io/remote-gpu-memory "lots": want a whole number`},
		{pod(map[string]string{AnnotationRemoteMemory: "1024", AnnotationRemoteCompute: "150"}, map[corev1.ResourceName]string{ResourceRemoteVGPU: "1"}),
			`flexgv.io/remote-gpu-compute "150": want a whole number from 1 to 100`},
	} {
		if _, _, err := PodRequest(c.pod); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.pod.Annotations, err, c.want)
		}
	}
}

// A pod asking for part of the SMs, under the node's MPS whose server runs
// as root, is refused when it says its container runs as another user:
// MPS serves one user at a time, so its CUDA calls would wait for every
// root pod to finish. Root, or a user the pod does not state, passes.
func TestSMPodsRunAsRoot(t *testing.T) {
	id := func(v int64) *int64 { return &v }
	yes := true
	for _, c := range []struct {
		what    string
		pod     corev1.PodSecurityContext
		ctr     *corev1.SecurityContext
		refused bool
	}{
		{"the container's runAsUser 1000", corev1.PodSecurityContext{}, &corev1.SecurityContext{RunAsUser: id(1000)}, true},
		{"the pod's runAsUser 1000", corev1.PodSecurityContext{RunAsUser: id(1000)}, nil, true},
		{"the pod's runAsNonRoot", corev1.PodSecurityContext{RunAsNonRoot: &yes}, nil, true},
		{"the pod's 1000, the container's 0", corev1.PodSecurityContext{RunAsUser: id(1000)}, &corev1.SecurityContext{RunAsUser: id(0)}, false},
		{"root", corev1.PodSecurityContext{RunAsUser: id(0)}, nil, false},
		{"no user stated", corev1.PodSecurityContext{}, nil, false},
	} {
		p := pod(map[string]string{AnnotationSM: "25"}, map[corev1.ResourceName]string{ResourceVGPU: "1", ResourceMemory: "1"})
		p.Spec.SecurityContext = &c.pod
		p.Spec.Containers[0].SecurityContext = c.ctr
		_, ok, err := PodRequest(p)
		if c.refused && (err == nil || !strings.Contains(err.Error(), "flexgv.io/gpu-sm: container c0 runs as a user other than root")) {
			t.Errorf("%s: PodRequest = %v, want the refusal", c.what, err)
		}
		if !c.refused && (err != nil || !ok) {
			t.Errorf("%s: PodRequest = %v, %v; want it taken", c.what, ok, err)
		}
		p.Annotations = nil // without gpu-sm, any user
		if _, ok, err := PodRequest(p); err != nil || !ok {
			t.Errorf("%s without %s: %v, %v", c.what, AnnotationSM, ok, err)
		}
	}
}
