{{/* Name of the chart, overridable with nameOverride. */}}
{{- define "tierkeeper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped full name; the release name alone when it already contains the chart name. */}}
{{- define "tierkeeper.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "tierkeeper.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "tierkeeper.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "tierkeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tierkeeper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tierkeeper.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "tierkeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tierkeeper
{{- end }}

{{- define "tierkeeper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tierkeeper.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is set; the tag defaults to the appVersion. */}}
{{- define "tierkeeper.image" -}}
{{- $image := index . 0 -}}
{{- $root := index . 1 -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end }}

{{/* Each cluster of values `clusters:` with jobDefaults and the pipeline image under its own `jobs`. */}}
{{- define "tierkeeper.cluster" -}}
{{- $cluster := deepCopy (index . 0) -}}
{{- $root := index . 1 -}}
{{- $jobs := mergeOverwrite (deepCopy $root.Values.jobDefaults) (deepCopy (default dict $cluster.jobs)) -}}
{{- if not $jobs.image -}}
{{- $_ := set $jobs "image" (include "tierkeeper.image" (list $root.Values.pipelineImage $root)) -}}
{{- end -}}
{{- $_ := set $cluster "jobs" $jobs -}}
{{- toYaml $cluster -}}
{{- end }}

{{/* The generated RBAC rules (files/rbac.yaml, from tierkeeper_operator.rbac). */}}
{{- define "tierkeeper.rbacRules" -}}
{{- .Files.Get "files/rbac.yaml" | fromYaml | toJson -}}
{{- end }}
