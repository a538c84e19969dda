{{- define "flexgv.labels" -}}
app.kubernetes.io/name: flexgv
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "flexgv.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}

{{- /* kube-scheduler of the cluster's own version unless told otherwise:
kube-scheduler supports no skew against its API server. Build metadata and
vendor suffixes (v1.37.2+k3s1, v1.37.2-eks-1) are not image tags. */ -}}
{{- define "flexgv.kubeSchedulerImage" -}}
{{- $tag := .Values.scheduler.image.tag | default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) -}}
{{ .Values.scheduler.image.repository }}:{{ $tag }}
{{- end }}

{{- define "flexgv.nonRootPod" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "flexgv.nonRootContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end }}

{{- define "flexgv.webhookExcluded" -}}
{{- concat (list "kube-system" "kube-public" "kube-node-lease" .Release.Namespace) .Values.webhook.excludeNamespaces | uniq | toJson }}
{{- end }}
