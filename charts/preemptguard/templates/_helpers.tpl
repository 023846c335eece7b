{{/*
Names. Every object is named from .Values.name, never from the release name, so that the chart
and the kustomize manifests name the same objects and `preemptguard certs --service <name>`
issues a certificate for the Service the chart makes.
*/}}
{{- define "preemptguard.name" -}}
{{- .Values.name -}}
{{- end -}}

{{- define "preemptguard.namespace" -}}
{{- .Values.namespace.name -}}
{{- end -}}

{{/*
Labels on every object's metadata: the two the kustomize base adds to each of its objects
(app.kubernetes.io/part-of, app.kubernetes.io/version) and Helm's own. Pod templates and
selectors get neither, as in the kustomize manifests.
*/}}
{{- define "preemptguard.labels" -}}
app.kubernetes.io/part-of: preemptguard
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{- define "preemptguard.selectorLabels" -}}
app.kubernetes.io/name: preemptguard
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "preemptguard.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
The name suffix kustomize's configMapGenerator and secretGenerator add (sigs.k8s.io/kustomize/api
hasher): the first 10 hex digits of the SHA-256 of the JSON of {data, kind, name[, type]}, with
0, 1, 3, a, e spelled g, h, k, m, t. Go's json.Marshal sorts map keys, as toJson does here. The
name is always empty: kustomize looks it up as the single field "metadata/name", which no object
has, so the hash depends on the content alone.
*/}}
{{- define "preemptguard.kustomizeHash" -}}
{{- toJson . | sha256sum | trunc 10 | replace "0" "g" | replace "1" "h" | replace "3" "k" | replace "a" "m" | replace "e" "t" -}}
{{- end -}}

{{/* The policy ConfigMap's data: file name -> content. */}}
{{- define "preemptguard.policyData" -}}
{{- $data := dict -}}
{{- if .Values.policy.content -}}
{{- $_ := set $data "policy.yaml" .Values.policy.content -}}
{{- else -}}
{{- range $path, $_ := .Files.Glob .Values.policy.path -}}
{{- $_ := set $data (base $path) (toString ($.Files.Get $path)) -}}
{{- end -}}
{{- end -}}
{{- if not $data -}}
{{- fail (printf "policy: no policy file: set policy.content, or policy.path to a glob that matches files inside the chart (%q matches none)" .Values.policy.path) -}}
{{- end -}}
{{- range $key, $text := $data -}}
{{- $doc := fromYaml $text -}}
{{- if or (hasKey $doc "Error") (ne (toString (get $doc "kind")) "PlacementPolicy") -}}
{{- fail (printf "policy: %s is not a PlacementPolicy (kind: PlacementPolicy, apiVersion: preemptguard.together.ai/v1alpha1)%s" $key (ternary (printf ": %v" (get $doc "Error")) "" (hasKey $doc "Error"))) -}}
{{- end -}}
{{- end -}}
{{- toJson $data -}}
{{- end -}}

{{- define "preemptguard.policyConfigMapName" -}}
{{- $base := printf "%s-policies" (include "preemptguard.name" .) -}}
{{- $data := include "preemptguard.policyData" . | fromJson -}}
{{- printf "%s-%s" $base (include "preemptguard.kustomizeHash" (dict "kind" "ConfigMap" "name" "" "data" $data)) -}}
{{- end -}}

{{/* Self-managed certificates: checked once, here. */}}
{{- define "preemptguard.selfManaged" -}}
{{- $c := .Values.certificates.selfManaged -}}
{{- $issue := printf "preemptguard certs --service %s --namespace %s --out certs" (include "preemptguard.name" .) (include "preemptguard.namespace" .) -}}
{{- if not $c.caCrt -}}
{{- fail (printf "certificates.selfManaged.caCrt is required in self-managed mode (the CA for every webhook's caBundle): issue certificates with `%s`, then pass --set-file certificates.selfManaged.caCrt=certs/ca.crt (and tlsCrt=certs/tls.crt, tlsKey=certs/tls.key), or use certificates.mode=cert-manager" $issue) -}}
{{- end -}}
{{- if and (not $c.existingSecret) (or (not $c.tlsCrt) (not $c.tlsKey)) -}}
{{- fail (printf "certificates.selfManaged.tlsCrt and tlsKey are required in self-managed mode unless existingSecret names a Secret: issue them with `%s`, then pass --set-file certificates.selfManaged.tlsCrt=certs/tls.crt --set-file certificates.selfManaged.tlsKey=certs/tls.key" $issue) -}}
{{- end -}}
{{- if and $c.existingSecret (or $c.tlsCrt $c.tlsKey) -}}
{{- fail "certificates.selfManaged: set either existingSecret or tlsCrt/tlsKey, not both" -}}
{{- end -}}
{{- end -}}

{{/*
Base64 as kustomize's generators write it (kyaml's encodeBase64): from 70 characters on, in lines
of 70, each ending with a newline. The API server's decoder skips the newlines; the hash and the
caBundle kustomize copies from the Secret include them.
*/}}
{{- define "preemptguard.kustomizeBase64" -}}
{{- $b := b64enc . -}}
{{- if lt (len $b) 70 -}}
{{- $b -}}
{{- else -}}
{{- $lines := list -}}
{{- range $i := until (div (add (len $b) 69) 70 | int) -}}
{{- $lines = append $lines (substr (mul $i 70 | int) (min (len $b) (mul (add $i 1) 70) | int) $b) -}}
{{- end -}}
{{- printf "%s\n" (join "\n" $lines) -}}
{{- end -}}
{{- end -}}

{{- define "preemptguard.tlsSecretData" -}}
{{- $c := .Values.certificates.selfManaged -}}
{{- $data := dict -}}
{{- range $key, $pem := dict "tls.crt" $c.tlsCrt "tls.key" $c.tlsKey "ca.crt" $c.caCrt -}}
{{- $_ := set $data $key (include "preemptguard.kustomizeBase64" $pem) -}}
{{- end -}}
{{- toJson $data -}}
{{- end -}}

{{/* The Secret the server reads its serving pair from. */}}
{{- define "preemptguard.tlsSecretName" -}}
{{- $base := printf "%s-tls" (include "preemptguard.name" .) -}}
{{- if eq .Values.certificates.mode "cert-manager" -}}
{{- $base -}}
{{- else if .Values.certificates.selfManaged.existingSecret -}}
{{- .Values.certificates.selfManaged.existingSecret -}}
{{- else -}}
{{- $data := include "preemptguard.tlsSecretData" . | fromJson -}}
{{- printf "%s-%s" $base (include "preemptguard.kustomizeHash" (dict "kind" "Secret" "type" "kubernetes.io/tls" "name" "" "data" $data)) -}}
{{- end -}}
{{- end -}}

{{/* The namespaces no hook selects: the configured ones and the chart's own. */}}
{{- define "preemptguard.excludedNamespaces" -}}
{{- toJson (append .Values.webhooks.excludedNamespaces (include "preemptguard.namespace" .) | uniq) -}}
{{- end -}}
