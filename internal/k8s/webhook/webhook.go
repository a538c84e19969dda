// Package webhook is FlexGV's admission webhook (flexgv webhook): it
// refuses pods whose vGPU requests cannot be honoured, saying why, before
// they reach the scheduler, and sends the pods that ask for vGPUs to the
// scheduler that runs the FlexGV extender.
package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

// Webhook answers admission reviews of pods.
type Webhook struct {
	// SchedulerName is given to pods that ask for vGPUs and name no
	// scheduler of their own; "": left as they are.
	SchedulerName string
	Log           *log.Logger
}

// maxBody bounds a review: one pod.
const maxBody = 8 << 20

// Handler serves /validate and /mutate.
func (w *Webhook) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /validate", func(rw http.ResponseWriter, r *http.Request) { w.serve(rw, r, w.validate) })
	mux.HandleFunc("POST /mutate", func(rw http.ResponseWriter, r *http.Request) { w.serve(rw, r, w.mutate) })
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) { io.WriteString(rw, "ok\n") })
	return mux
}

func (w *Webhook) serve(rw http.ResponseWriter, r *http.Request, review func(*admissionv1.AdmissionRequest, *corev1.Pod, *admissionv1.AdmissionResponse)) {
	var ar admissionv1.AdmissionReview
	if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, maxBody)).Decode(&ar); err != nil || ar.Request == nil {
		http.Error(rw, fmt.Sprintf("flexgv webhook: not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: ar.Request.UID, Allowed: true}
	var pod corev1.Pod
	if ar.Request.Kind.Kind != "Pod" {
		resp.Allowed, resp.Result = false, &metav1.Status{Message: "flexgv webhook: reviews pods only, not " + ar.Request.Kind.Kind, Code: http.StatusBadRequest}
	} else if err := json.Unmarshal(ar.Request.Object.Raw, &pod); err != nil {
		resp.Allowed, resp.Result = false, &metav1.Status{Message: "flexgv webhook: " + err.Error(), Code: http.StatusBadRequest}
	} else {
		review(ar.Request, &pod, resp)
	}
	out := admissionv1.AdmissionReview{TypeMeta: ar.TypeMeta, Response: resp}
	rw.Header().Set("Content-Type", "application/json")
	json.NewEncoder(rw).Encode(out)
}

// placement are the annotations the extender writes with a pod's binding:
// where its vGPUs are. A pod that set them itself would be given GPUs no
// scheduler counted, a remote one on any server.
var placement = []string{vgpu.AnnotationGPUs, vgpu.AnnotationRemoteGPU, vgpu.AnnotationBoundAt}

// validate refuses a pod whose request cannot be honoured, and one that
// names its own placement (created with it, or changing it later).
func (w *Webhook) validate(req *admissionv1.AdmissionRequest, pod *corev1.Pod, resp *admissionv1.AdmissionResponse) {
	err := placedByItself(req, pod)
	if err == nil {
		_, _, err = vgpu.PodRequest(pod)
	}
	if err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonInvalid, Code: http.StatusUnprocessableEntity, Message: err.Error()}
		if w.Log != nil {
			w.Log.Printf("refused pod %s/%s: %v", pod.Namespace, podName(pod), err)
		}
	}
}

func placedByItself(req *admissionv1.AdmissionRequest, pod *corev1.Pod) error {
	var old corev1.Pod
	if req.Operation == admissionv1.Update {
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return fmt.Errorf("the pod before the update cannot be read: %v", err)
		}
	}
	for _, a := range placement {
		if pod.Annotations[a] != old.Annotations[a] {
			return fmt.Errorf("annotation %s is written by the flexgv scheduler when it binds the pod; a pod may not set or change it", a)
		}
	}
	return nil
}

func podName(pod *corev1.Pod) string {
	if pod.Name != "" {
		return pod.Name
	}
	return pod.GenerateName + "*"
}

// mutate sends a pod asking for vGPUs to SchedulerName and spells out its
// priority; a pod it cannot read is left to validate.
func (w *Webhook) mutate(_ *admissionv1.AdmissionRequest, pod *corev1.Pod, resp *admissionv1.AdmissionResponse) {
	r, ok, err := vgpu.PodRequest(pod)
	if err != nil || !ok {
		return
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	var ops []op
	if w.SchedulerName != "" && (pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName) {
		ops = append(ops, op{"add", "/spec/schedulerName", w.SchedulerName})
	}
	if _, set := pod.Annotations[vgpu.AnnotationPriority]; !set {
		if pod.Annotations == nil {
			ops = append(ops, op{"add", "/metadata/annotations", map[string]string{vgpu.AnnotationPriority: string(r.Priority)}})
		} else {
			ops = append(ops, op{"add", "/metadata/annotations/" + jsonPointer(vgpu.AnnotationPriority), string(r.Priority)})
		}
	}
	if len(ops) == 0 {
		return
	}
	patch, _ := json.Marshal(ops)
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
}

// jsonPointer escapes a key for a JSON pointer (RFC 6901).
var jsonPointer = strings.NewReplacer("~", "~0", "/", "~1").Replace
