{{/* Labels of every object: the kustomize build's, plus Helm's. */}}
{{- define "quotaguard.labels" -}}
app.kubernetes.io/name: quotaguard
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end }}

{{/* Selector labels: stable across upgrades, as in config/. */}}
{{- define "quotaguard.selector" -}}
app.kubernetes.io/name: quotaguard
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- define "quotaguard.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end }}

{{- define "quotaguard.policyConfigMap" -}}
{{- .Values.policy.existingConfigMap | default "quotaguard-policy" -}}
{{- end }}

{{/* A webhook configuration file of the chart, the copy of the repository's webhook/ file
     (tools/chart_files.py keeps them equal), so a webhook added there is served by both builds. */}}
{{- define "quotaguard.webhookFile" -}}
{{- $path := printf "files/webhook/%s" .file -}}
{{- $text := .root.Files.Get $path -}}
{{- if not $text -}}
{{- fail (printf "no %s in the chart" $path) -}}
{{- end -}}
{{- $text -}}
{{- end }}

{{- define "quotaguard.mutatingName" -}}
{{- (include "quotaguard.webhookFile" (dict "root" . "file" "mutatingwebhookconfiguration.yaml") | fromYaml).metadata.name -}}
{{- end }}

{{/* Both validating configurations' names, as a YAML flow list's items. */}}
{{- define "quotaguard.validatingNames" -}}
{{- $names := list -}}
{{- range $file := list "validatingwebhookconfiguration.yaml" "validatingwebhookconfiguration-resources.yaml" -}}
{{- $names = append $names (include "quotaguard.webhookFile" (dict "root" $ "file" $file) | fromYaml).metadata.name -}}
{{- end -}}
{{- join ", " $names -}}
{{- end }}

{{/* The resource names the webhooks send besides nvidia.com/, DRA's implicit and
     accelerator-like ones, as a JSON list: webhook.extraResourceNames, and the names the
     chart's own policy (policy.content, or the sample) declares that those do not cover, as
     `quotaguard registrations` finds them (quotaguard/policy/sent_names.py). */}}
{{- define "quotaguard.extraResourceNames" -}}
{{- $names := list -}}
{{- range .Values.webhook.extraResourceNames -}}
{{- $names = append $names . -}}
{{- end -}}
{{- if not .Values.policy.existingConfigMap -}}
{{- $policy := (.Values.policy.content | default (.Files.Get "files/policy.yaml")) | fromYaml -}}
{{- $spec := get $policy "spec" -}}
{{- $classes := (kindIs "map" $spec) | ternary (get (default dict $spec) "gpuClasses") list -}}
{{- range $class := (kindIs "slice" $classes) | ternary $classes list -}}
{{- if kindIs "map" $class -}}
{{- $declared := list (get $class "resource") -}}
{{- $dra := get $class "dra" -}}
{{- if kindIs "map" $dra -}}
{{- $declared = append $declared (get $dra "extendedResourceName") -}}
{{- end -}}
{{- range $name := $declared -}}
{{- if and (kindIs "string" $name) (contains "/" $name) (not (hasPrefix "nvidia.com/" $name)) (not (hasPrefix "deviceclass.resource.kubernetes.io/" $name)) (not (regexMatch "(?i)(gpu|cuda|neuron|gaudi|habana|ascend|accel|fpga|qaic|(^|[^a-z])(tpu|npu|xpu|ipu|mlu|dcu|gcu|vpu))" $name)) -}}
{{- $names = append $names $name -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson ($names | uniq | sortAlpha) -}}
{{- end }}

{{/* A matchCondition's CEL that also sends the names of quotaguard.extraResourceNames: the
     replacement quotaguard/webhook/name_widening.py makes, on the same fragments. */}}
{{- define "quotaguard.widenedExpression" -}}
{{- $quoted := list -}}
{{- range .names -}}
{{- $quoted = append $quoted (printf "'%s'" .) -}}
{{- end -}}
{{- $listed := printf "[%s]" (join ", " $quoted) -}}
{{- $head := "name.startsWith('nvidia.com/') || name.startsWith('deviceclass.resource.kubernetes.io/')" -}}
{{- $another := "name != 'nvidia.com/gpu' && name.startsWith('nvidia.com/')" -}}
{{- .expression | replace $head (printf "name in %s || %s" $listed $head) | replace $another (printf "name != 'nvidia.com/gpu' && (name.startsWith('nvidia.com/') || name in %s)" $listed) -}}
{{- end }}

{{/* One webhook configuration as this release installs it: the release namespace for the
     Service and the exemption, pilot's selector and failurePolicy, the CA bundle or the
     cert-manager annotation. */}}
{{- define "quotaguard.webhookConfiguration" -}}
{{- $root := .root -}}
{{- $doc := include "quotaguard.webhookFile" . | fromYaml -}}
{{- $ns := $root.Release.Namespace -}}
{{- $meta := $doc.metadata -}}
{{- $labels := include "quotaguard.labels" (dict "root" $root "component" "webhook") | fromYaml -}}
{{- $_ := set $meta "labels" (merge (default dict $meta.labels) $labels) -}}
{{- if eq $root.Values.certificates.source "certManager" -}}
{{- $_ := set $meta "annotations" (merge (default dict $meta.annotations) (dict "cert-manager.io/inject-ca-from" (printf "%s/quotaguard-webhook" $ns))) -}}
{{- end -}}
{{- $names := include "quotaguard.extraResourceNames" $root | fromJsonArray -}}
{{- range $hook := $doc.webhooks -}}
{{- if $names -}}
{{- range $condition := $hook.matchConditions -}}
{{- $_ := set $condition "expression" (include "quotaguard.widenedExpression" (dict "expression" $condition.expression "names" $names)) -}}
{{- end -}}
{{- end -}}
{{- with $hook.clientConfig.service -}}
{{- $_ := set . "namespace" $ns -}}
{{- end -}}
{{- if eq $root.Values.certificates.source "provided" -}}
{{- $_ := set $hook.clientConfig "caBundle" (required "certificates.caBundle is required with certificates.source: provided" $root.Values.certificates.caBundle | b64enc) -}}
{{- end -}}
{{- range $expression := $hook.namespaceSelector.matchExpressions -}}
{{- if eq $expression.key "kubernetes.io/metadata.name" -}}
{{- $values := list -}}
{{- range $expression.values -}}
{{- $values = append $values (eq . "quotaguard-system" | ternary $ns .) -}}
{{- end -}}
{{- $_ := set $expression "values" ($values | uniq) -}}
{{- end -}}
{{- end -}}
{{- if $root.Values.pilot.enabled -}}
{{- $_ := set $hook "failurePolicy" "Ignore" -}}
{{- $_ := set $hook.namespaceSelector "matchLabels" (dict "quotaguard.dev/pilot" "true") -}}
{{- end -}}
{{- end -}}
{{- toYaml $doc -}}
{{- end }}

{{/* The arguments of `quotaguard certs` (Job and CronJob). */}}
{{- define "quotaguard.certsArgs" -}}
- certs
- --namespace
- {{ .Release.Namespace }}
- --service
- quotaguard-webhook
- --secret
- quotaguard-webhook-tls
- --ca-secret
- quotaguard-webhook-ca
- --mutating-webhook
- {{ include "quotaguard.mutatingName" . }}
{{- range $name := splitList ", " (include "quotaguard.validatingNames" .) }}
- --validating-webhook
- {{ $name }}
{{- end }}
{{- end }}

{{- define "quotaguard.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "quotaguard.containerSecurityContext" -}}
runAsNonRoot: true
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "quotaguard.policyVolume" -}}
- name: policy
  configMap:
    name: {{ include "quotaguard.policyConfigMap" . }}
    {{- if .Values.policy.existingConfigMap }}
    items:
      - key: {{ .Values.policy.existingConfigMapKey }}
        path: policy.yaml
    {{- end }}
{{- end }}

{{- define "quotaguard.certsPod" -}}
serviceAccountName: quotaguard-certs
restartPolicy: OnFailure
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- include "quotaguard.podSecurityContext" . | nindent 2 }}
containers:
  - name: certs
    image: {{ include "quotaguard.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args:
      {{- include "quotaguard.certsArgs" . | nindent 6 }}
    resources:
      {{- toYaml .Values.certificates.selfManaged.resources | nindent 6 }}
    securityContext:
      {{- include "quotaguard.containerSecurityContext" . | nindent 6 }}
{{- end }}

{{/* A pod template's metadata: the chart-wide podLabels and podAnnotations, the component's
     own (`own`, its values) over them, and the selector labels over both, so that no value can
     take a pod out of its Deployment. */}}
{{- define "quotaguard.podMetadata" -}}
{{- $values := .root.Values -}}
{{- $own := .own | default dict -}}
{{- $selector := include "quotaguard.selector" .component | fromYaml -}}
{{- $labels := merge $selector (deepCopy ($own.podLabels | default dict)) (deepCopy ($values.podLabels | default dict)) -}}
{{- $annotations := merge (deepCopy ($own.podAnnotations | default dict)) (deepCopy ($values.podAnnotations | default dict)) -}}
labels:
  {{- toYaml $labels | nindent 2 }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A deployment's affinity: replicas preferably on different nodes, and the `affinity` value
     merged over it (a nodeAffinity is added; a list it sets replaces ours). */}}
{{- define "quotaguard.affinity" -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "quotaguard.selector" .component | fromYaml)) -}}
{{- $spread := dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term)) -}}
{{- toYaml (mergeOverwrite (dict "podAntiAffinity" $spread) (deepCopy (.affinity | default dict))) -}}
{{- end }}
