{{- define "flexgv.labels" -}}
app.kubernetes.io/name: flexgv
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "flexgv.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end }}
