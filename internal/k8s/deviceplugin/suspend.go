package deviceplugin

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
	"github.com/flexgv/flexgv/internal/suspend"
)

// The node's part of suspension instead of eviction (vgpu/suspend.go):
// the extender asks, through a pod's ConditionSuspend, for its pod to be
// suspended or to resume; the plugin has the daemon do it and says so in
// ConditionSuspended.
//
// kube-scheduler and the kubelet count a pod's extended resources as long
// as the pod runs: while pods are suspended, the node publishes their
// memory and compute on top of its GPUs' (lent), before it says they are
// suspended, so that the pod they made room for fits the node's totals;
// the extender keeps the per-GPU count true.

// syncSuspensions suspends and resumes the node's pods as asked (every
// cfg.SyncEvery, beside Allocate: a suspend waits for the pod's submitted
// work).
func (p *Plugin) syncSuspensions(ctx context.Context) {
	pods, err := p.nodePods(ctx)
	if err != nil {
		p.log.Print(err)
		return
	}
	listed := map[types.UID]bool{}
	for i := range pods {
		pod := &pods[i]
		r, ok, err := vgpu.PodRequest(pod)
		if err != nil || !ok || r.Remote || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		listed[pod.UID] = true
		name := TenantPrefix + string(pod.UID)
		switch want, off := vgpu.SuspendWanted(pod), vgpu.Suspended(pod); {
		case want && !off && !vgpu.SuspendFailed(pod):
			did, err := p.daemon.Suspend(ctx, name)
			if err != nil && !errors.Is(err, suspend.ErrSuspended) {
				p.log.Printf("pod %s/%s could not be suspended: %v", pod.Namespace, pod.Name, err)
				p.setSuspended(ctx, pod, corev1.ConditionFalse, vgpu.ReasonSuspendFailed, err.Error())
				continue
			}
			p.lend(ctx, pod.UID, &r)
			p.log.Printf("suspended pod %s/%s: %s", pod.Namespace, pod.Name, did)
			p.setSuspended(ctx, pod, corev1.ConditionTrue, "Suspended", did)
		case !want && off:
			did, err := p.daemon.Resume(ctx, name)
			if err != nil && !errors.Is(err, suspend.ErrNotSuspended) {
				p.log.Printf("pod %s/%s stays suspended for now: %v", pod.Namespace, pod.Name, err)
				continue // tried again next time: its room was counted for it
			}
			p.log.Printf("resumed pod %s/%s: %s", pod.Namespace, pod.Name, did)
			if p.setSuspended(ctx, pod, corev1.ConditionFalse, "Resumed", did) {
				p.lend(ctx, pod.UID, nil)
			}
		case off:
			p.lend(ctx, pod.UID, &r) // suspended before this daemon started
		}
	}
	p.mu.Lock()
	var gone []types.UID
	for uid := range p.lent {
		if !listed[uid] {
			gone = append(gone, uid)
		}
	}
	p.mu.Unlock()
	for _, uid := range gone {
		p.lend(ctx, uid, nil)
	}
}

// setSuspended sets pod's ConditionSuspended; false where it could not.
func (p *Plugin) setSuspended(ctx context.Context, pod *corev1.Pod, s corev1.ConditionStatus, reason, msg string) bool {
	err := vgpu.SetCondition(ctx, p.client, pod, corev1.PodCondition{Type: vgpu.ConditionSuspended, Status: s, Reason: reason, Message: msg})
	if err != nil {
		p.log.Printf("pod %s/%s: setting %s: %v", pod.Namespace, pod.Name, vgpu.ConditionSuspended, err)
	}
	return err == nil
}

// lend counts pod uid's request (r; nil: no longer) as suspended in what
// the node publishes, and publishes it at once where it changed.
func (p *Plugin) lend(ctx context.Context, uid types.UID, r *vgpu.Request) {
	p.mu.Lock()
	_, had := p.lent[uid]
	if r != nil {
		p.lent[uid] = *r
	} else {
		delete(p.lent, uid)
	}
	gpus := p.gpus
	p.mu.Unlock()
	if had == (r != nil) {
		return
	}
	if err := p.publish(ctx, gpus); err != nil {
		p.log.Printf("publishing the GPUs on node %s: %v", p.cfg.NodeName, err)
	}
}
