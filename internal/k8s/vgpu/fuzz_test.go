package vgpu

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Whatever a pod's author writes in its annotations and resources, the
// webhook and the extender answer without a panic, an accepted request is
// within the bounds the rest of the system assumes, and a placement never
// gives a GPU more memory or compute than it has (no sum overflows).
func FuzzPodRequest(f *testing.F) {
	f.Add("high", "40", "", "suspend", "1", "10240", "30", "", "", "", false)
	f.Add("7", "", "25", "", "2", "100", "", "", "", "", false)
	f.Add("", "", "", "", "", "", "", "1", "4096", "50", true)
	f.Add("", "", "", "", "1", "9223372036854775807", "", "", "", "", false)
	f.Add("", "", "", "", "3", "8e18", "100", "", "", "", false)
	f.Add("low", "0x10", "-1", "evict", "1.5", "1Ki", "101", "1", "1099511627776", "0", true)
	f.Fuzz(func(t *testing.T, prio, capPct, sm, preempt, count, mem, compute, remote, remoteMem, remoteCompute string, both bool) {
		ann := map[string]string{}
		for k, v := range map[string]string{AnnotationPriority: prio, AnnotationComputeMax: capPct, AnnotationSM: sm,
			AnnotationPreemption: preempt, AnnotationRemoteMemory: remoteMem, AnnotationRemoteCompute: remoteCompute} {
			if v != "" {
				ann[k] = v
			}
		}
		limits := corev1.ResourceList{}
		for n, v := range map[corev1.ResourceName]string{ResourceVGPU: count, ResourceMemory: mem, ResourceCompute: compute, ResourceRemoteVGPU: remote} {
			if q, err := resource.ParseQuantity(v); err == nil {
				limits[n] = q
			}
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: ann}}
		p.Spec.Containers = []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Limits: limits}}}
		if both { // a second container asking too
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "b", Resources: corev1.ResourceRequirements{Limits: limits}})
		}
		r, ok, err := PodRequest(p)
		if err != nil || !ok {
			return
		}
		if r.Count < 1 || r.MemoryMiB < 1 || r.MemoryMiB > MaxMemoryMiB || r.ComputePct < 0 || r.ComputePct > 100 ||
			r.ComputeMax < 0 || r.ComputeMax > 100 || r.SM < 0 || r.SM > 100 || (r.Remote && r.Count != 1) {
			t.Fatalf("accepted out of bounds: %+v", r)
		}
		inv := Inventory{Slots: 64, ContextMiB: 512, MPS: true, GPUs: []GPU{
			{UUID: "GPU-a", MemoryMiB: 81559, Healthy: true}, {UUID: "GPU-b", MemoryMiB: 143771, Healthy: true}}}
		used := map[string]Use{}
		for i := 0; i < 3; i++ {
			uuids, _, err := Choose(inv, used, r, Binpack)
			if err != nil {
				return
			}
			if len(uuids) != r.Count {
				t.Fatalf("%+v placed on %v", r, uuids)
			}
			for _, u := range uuids {
				x := used[u]
				x.Add(r, inv.ContextMiB)
				used[u] = x
			}
			for _, g := range inv.GPUs {
				if u := used[g.UUID]; u.MemoryMiB > g.MemoryMiB || u.MemoryMiB < 0 || u.ComputePct > 100 {
					t.Fatalf("%+v, placed %d times: GPU %s of %d MiB holds %+v", r, i+1, g.UUID, g.MemoryMiB, u)
				}
			}
		}
	})
}

// A node's inventory annotation, however garbled, is read without a panic,
// and one accepted offers a capacity that did not overflow.
func FuzzNodeInventory(f *testing.F) {
	f.Add(Inventory{Slots: 8, ContextMiB: 512, GPUs: []GPU{{UUID: "GPU-a", MemoryMiB: 81559, Healthy: true}}}.Encode())
	f.Add(`{"slots":1,"contextMiB":0,"gpus":[{"uuid":"a","memoryMiB":9223372036854775807,"healthy":true},{"uuid":"b","memoryMiB":9223372036854775807,"healthy":true}]}`)
	f.Add(`{"slots":-1}`)
	f.Add(`{"slots":2,"gpus":[{"uuid":"a","memoryMiB":1},{"uuid":"a","memoryMiB":1}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		inv, ok, err := NodeInventory(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{AnnotationInventory: s}}})
		if err != nil || !ok {
			return
		}
		c := inv.Capacity()
		if m := c[ResourceMemory]; m.Value() < 0 {
			t.Fatalf("capacity %s MiB from %s", m.String(), s)
		}
		if inv.Slots < 1 || inv.ContextMiB < 0 {
			t.Fatalf("accepted %+v", inv)
		}
	})
}
