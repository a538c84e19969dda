package extender

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

// Remote vGPUs of a drained GPU server (vgpu/move.go): a server node
// cordoned keeps no remote vGPU; each gets another server's GPU, chosen
// as a new one would be, and counts there from the asking.

// move is a remote vGPU to move: the pod, and NODE/UUID.
type move struct {
	pod *corev1.Pod
	to  string
}

// movesDue are the remote vGPUs on cordoned servers with nowhere to go
// asked yet (or asked to a server cordoned since), each given a new
// server and GPU where one has room: placed there (e.moving) until the
// informer shows it.
func (e *Extender) movesDue() []move {
	e.mu.Lock()
	defer e.mu.Unlock()
	nodes, err := e.nodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	cordoned := map[string]bool{}
	for _, n := range nodes {
		cordoned[n.Name] = n.Spec.Unschedulable
	}
	var due []move
	for _, n := range nodes {
		if inv, ok, err := vgpu.NodeInventory(n); !cordoned[n.Name] || err != nil || !ok || inv.Remote == "" {
			continue
		}
		objs, _ := e.pods.ByIndex(byNode, n.Name)
		for _, obj := range objs {
			p := obj.(*corev1.Pod)
			server, _, _ := vgpu.PodRemoteGPU(p)
			if server != n.Name || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			if to, _, moving := vgpu.PodRemoteMove(p); moving && !cordoned[to] {
				continue
			}
			if pl, asked := e.moving[p.UID]; asked && !cordoned[pl.node] {
				continue
			}
			r, ok, err := vgpu.PodRequest(p)
			if err != nil || !ok {
				continue
			}
			to, uuid, err := e.chooseRemote(r, int64(podPriority(p)))
			if err != nil {
				if why := err.Error(); e.unmoved[p.UID] != why {
					e.unmoved[p.UID] = why
					e.log.Printf("the remote vGPU of %s/%s stays on %s, which is cordoned: %v", p.Namespace, p.Name, server, err)
				}
				continue
			}
			delete(e.unmoved, p.UID)
			e.moving[p.UID] = placement{node: to, gpus: []string{uuid}, req: r}
			due = append(due, move{p, to + "/" + uuid})
		}
	}
	return due
}

// askMoves sets the pods' ConditionMove; one not set is not placed there.
func (e *Extender) askMoves(ctx context.Context, moves []move) {
	for _, m := range moves {
		server, _, _ := vgpu.PodRemoteGPU(m.pod)
		err := vgpu.SetCondition(ctx, e.client, m.pod, corev1.PodCondition{
			Type: vgpu.ConditionMove, Status: corev1.ConditionTrue, Reason: "ServerDrained", Message: m.to,
		})
		if err != nil {
			e.log.Printf("asking the remote vGPU of %s/%s to move to %s: %v", m.pod.Namespace, m.pod.Name, m.to, err)
			e.mu.Lock()
			delete(e.moving, m.pod.UID)
			e.mu.Unlock()
			continue
		}
		e.log.Printf("moving the remote vGPU of %s/%s from %s (cordoned) to %s", m.pod.Namespace, m.pod.Name, server, m.to)
	}
}
