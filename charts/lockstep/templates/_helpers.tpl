{{/* Chart name, overridable with nameOverride. */}}
{{- define "lockstep.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects: the release name, suffixed with the chart name unless it already contains it. */}}
{{- define "lockstep.fullname" -}}
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

{{- define "lockstep.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lockstep.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "lockstep.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "lockstep.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "lockstep.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lockstep.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "lockstep.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Leader election runs exactly when more than one replica may be alive at once. */}}
{{- define "lockstep.leaderElect" -}}
{{- if gt (int .Values.replicaCount) 1 }}true{{ else }}false{{ end }}
{{- end }}

{{/* featureGates as the kube-scheduler flag syntax: Name=true,Other=false (sorted by name). */}}
{{- define "lockstep.featureGates" -}}
{{- $pairs := list }}
{{- range $name, $enabled := .Values.featureGates }}
{{- $pairs = append $pairs (printf "%s=%t" $name $enabled) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* scheduling.scoreWeights as Name=weight pairs (sorted by name); empty: lockstep's defaults. */}}
{{- define "lockstep.scoreWeights" -}}
{{- $pairs := list }}
{{- range $name, $weight := .Values.scheduling.scoreWeights }}
{{- $pairs = append $pairs (printf "%s=%d" $name (int $weight)) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}
