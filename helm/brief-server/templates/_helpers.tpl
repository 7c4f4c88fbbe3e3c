{{/*
Chart name, truncated to 63 characters (the DNS label limit).
*/}}
{{- define "brief-server.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: "<release>-<chart>", or the release name when it already holds the
chart name.
*/}}
{{- define "brief-server.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "brief-server.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "brief-server.labels" -}}
helm.sh/chart: {{ include "brief-server.chart" . }}
{{ include "brief-server.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: server
{{- end }}

{{- define "brief-server.selectorLabels" -}}
app.kubernetes.io/name: {{ include "brief-server.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "brief-server.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "brief-server.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The mode, checked: "gpu" or "cpu".
*/}}
{{- define "brief-server.mode" -}}
{{- if not (has .Values.mode (list "gpu" "cpu")) }}
{{- fail (printf "mode must be gpu or cpu, not %q" (toString .Values.mode)) }}
{{- end }}
{{- .Values.mode }}
{{- end }}

{{- define "brief-server.gpu" -}}
{{- if eq (include "brief-server.mode" .) "gpu" }}true{{ end }}
{{- end }}

{{- define "brief-server.image" -}}
{{- $tag := default (printf "%s-%s" .Chart.AppVersion (include "brief-server.mode" .)) .Values.image.tag }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}

{{/*
BRIEF_LLM_BACKEND after the mode.
*/}}
{{- define "brief-server.llmBackend" -}}
{{- $gpu := include "brief-server.gpu" . }}
{{- $backend := default (ternary "vllm" "llamacpp" (eq $gpu "true")) .Values.llm.backend }}
{{- if not (has $backend (list "vllm" "llamacpp" "openai")) }}
{{- fail (printf "llm.backend must be vllm, llamacpp or openai, not %q" $backend) }}
{{- end }}
{{- if and (eq $backend "vllm") (ne $gpu "true") }}
{{- fail "llm.backend=vllm needs mode=gpu" }}
{{- end }}
{{- if and (eq $backend "openai") (not .Values.llm.baseUrl) }}
{{- fail "llm.backend=openai needs llm.baseUrl" }}
{{- end }}
{{- $backend }}
{{- end }}

{{- define "brief-server.encoderDevice" -}}
{{- default (ternary "cuda" "cpu" (eq (include "brief-server.gpu" .) "true")) .Values.encoder.device }}
{{- end }}

{{- define "brief-server.apiKeySecretName" -}}
{{- default (include "brief-server.fullname" .) .Values.apiKey.existingSecret }}
{{- end }}

{{- define "brief-server.modelClaimName" -}}
{{- default (printf "%s-models" (include "brief-server.fullname" .)) .Values.modelStorage.existingClaim }}
{{- end }}

{{/*
Refuse a deployment that would lose sessions between replicas.
*/}}
{{- define "brief-server.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (ne .Values.service.sessionAffinity "ClientIP") }}
{{- fail "replicaCount > 1 needs service.sessionAffinity=ClientIP: sessions live in one pod's memory (see values.yaml)" }}
{{- end }}
{{- if and (include "brief-server.gpu" .) (lt (int .Values.gpu.count) 1) }}
{{- fail "mode=gpu needs gpu.count >= 1" }}
{{- end }}
{{- end }}
