{{/*
Names, with the usual semantics: "preemptguard.name" is the chart's name (nameOverride), the
app.kubernetes.io/name label; "preemptguard.fullname" names the objects: fullnameOverride, else
the release name when it contains the chart's name, else <release>-<name>, cut to 63
characters. Release "preemptguard" names the objects as the kustomize manifests do, and
`preemptguard certs --service <fullname>` issues a certificate for the Service the chart makes.
*/}}
{{- define "preemptguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "preemptguard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The observer's objects; its Service's name is a DNS label too (63 characters). */}}
{{- define "preemptguard.observerName" -}}
{{- printf "%s-observer" (include "preemptguard.fullname" . | trunc 54 | trimSuffix "-") -}}
{{- end -}}

{{- define "preemptguard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Every namespaced object goes into the release's namespace (helm install --namespace). */}}
{{- define "preemptguard.namespace" -}}
{{- .Release.Namespace -}}
{{- end -}}

{{/*
Values of chart 0.1 that are gone: accepted only where they say what the chart does anyway, so
that a values file written for 0.1 fails with what to change rather than doing something else.
*/}}
{{- define "preemptguard.removedValues" -}}
{{- if and (hasKey .Values "name") (ne (toString .Values.name) (include "preemptguard.fullname" .)) -}}
{{- fail (printf "name was removed: objects are named after the release (here %s); set fullnameOverride=%s to keep the name %s" (include "preemptguard.fullname" .) (toString .Values.name) (toString .Values.name)) -}}
{{- end -}}
{{- $ns := .Values.namespace | default dict -}}
{{- if and (hasKey $ns "name") (ne (toString $ns.name) .Release.Namespace) -}}
{{- fail (printf "namespace.name was removed: every object goes into the release's namespace (%s); install with `helm install --namespace %s --create-namespace`" .Release.Namespace (toString $ns.name)) -}}
{{- end -}}
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
helm.sh/chart: {{ include "preemptguard.chart" . }}
{{- end -}}

{{- define "preemptguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "preemptguard.name" . }}
app.kubernetes.io/component: webhook
{{- end -}}

{{/* The webhook pods' labels: podLabels, then the selector's (which podLabels cannot change). */}}
{{- define "preemptguard.podLabels" -}}
{{- $selector := include "preemptguard.selectorLabels" . | fromYaml -}}
{{- toYaml (merge (dict) $selector (.Values.podLabels | default dict)) -}}
{{- end -}}

{{/* priorityClassName, else the chart's own class where it makes one. */}}
{{- define "preemptguard.priorityClassName" -}}
{{- if .Values.priorityClassName -}}
{{- .Values.priorityClassName -}}
{{- else if .Values.priorityClass.create -}}
{{- include "preemptguard.fullname" . -}}
{{- end -}}
{{- end -}}

{{/*
The webhook's node affinity: never on preemptible nodes. The NotIn is ANDed into each required
term of affinity.nodeAffinity (or is the one term); preferred terms are affinity's.
*/}}
{{- define "preemptguard.nodeAffinity" -}}
{{- $user := deepCopy ((.Values.affinity | default dict).nodeAffinity | default dict) -}}
{{- $notPreemptible := dict "key" "together.ai/compute-class" "operator" "NotIn" "values" (list "preemptible") -}}
{{- $required := $user.requiredDuringSchedulingIgnoredDuringExecution | default dict -}}
{{- $terms := list -}}
{{- range ($required.nodeSelectorTerms | default (list dict)) -}}
{{- $term := deepCopy . -}}
{{- $_ := set $term "matchExpressions" (concat (list $notPreemptible) ($term.matchExpressions | default list)) -}}
{{- $terms = append $terms $term -}}
{{- end -}}
{{- $_ := set $user "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" $terms) -}}
{{- toYaml $user -}}
{{- end -}}

{{/*
The webhook pods' affinity: the node affinity above; one replica per node where possible
(preferred), then affinity's own pod (anti-)affinity terms.
*/}}
{{- define "preemptguard.affinity" -}}
{{- $user := deepCopy (.Values.affinity | default dict) -}}
{{- $spread := dict "weight" 100 "podAffinityTerm" (dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "preemptguard.selectorLabels" . | fromYaml))) -}}
{{- $anti := $user.podAntiAffinity | default dict -}}
{{- $_ := set $anti "preferredDuringSchedulingIgnoredDuringExecution" (concat (list $spread) ($anti.preferredDuringSchedulingIgnoredDuringExecution | default list)) -}}
{{- $_ = set $user "podAntiAffinity" $anti -}}
{{- $_ = set $user "nodeAffinity" (include "preemptguard.nodeAffinity" . | fromYaml) -}}
{{- toYaml $user -}}
{{- end -}}

{{/* Across zones where possible, then topologySpreadConstraints (selecting the webhook's pods by default). */}}
{{- define "preemptguard.topologySpreadConstraints" -}}
{{- $selector := dict "matchLabels" (include "preemptguard.selectorLabels" . | fromYaml) -}}
{{- $constraints := list (dict "maxSkew" 1 "topologyKey" "topology.kubernetes.io/zone" "whenUnsatisfiable" "ScheduleAnyway" "labelSelector" $selector) -}}
{{- range .Values.topologySpreadConstraints -}}
{{- $constraint := deepCopy . -}}
{{- if not (hasKey $constraint "labelSelector") -}}
{{- $_ := set $constraint "labelSelector" $selector -}}
{{- end -}}
{{- $constraints = append $constraints $constraint -}}
{{- end -}}
{{- toYaml $constraints -}}
{{- end -}}

{{/* image.digest, when set, pins the image (repository@digest); else the tag or appVersion. */}}
{{- define "preemptguard.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
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

{{/*
The chart's own policy files and their admission policies (not policy.content nor
admissionPolicies.content, which are yours) name the webhook's namespace, preemptguard-system,
where the pods must never wait on the hooks and alone may use the webhook's PriorityClass,
preemptguard: written here as the release's namespace and the PriorityClass the chart makes, as
`preemptguard export` writes them for a policy naming those (tests/test_helm_chart.py compares).
Release "preemptguard" in preemptguard-system changes nothing. (list $ text)
*/}}
{{- define "preemptguard.ownNames" -}}
{{- $ := index . 0 -}}
{{- $fullname := include "preemptguard.fullname" $ -}}
{{- $text := regexReplaceAll "\\bpreemptguard-system\\b" (index . 1) (include "preemptguard.namespace" $) -}}
{{- $text = regexReplaceAll "(?m)^([ \\t]*-[ \\t]*name:[ \\t]*)preemptguard[ \\t]*$" $text (printf "${1}%s" $fullname) -}}
{{- $text | replace "'preemptguard'" (printf "'%s'" $fullname) -}}
{{- end -}}

{{/* The policy ConfigMap's data: file name -> content. */}}
{{- define "preemptguard.policyData" -}}
{{- $data := dict -}}
{{- if .Values.policy.content -}}
{{- $_ := set $data "policy.yaml" .Values.policy.content -}}
{{- else -}}
{{- range $path, $_ := .Files.Glob .Values.policy.path -}}
{{- $_ := set $data (base $path) (include "preemptguard.ownNames" (list $ (toString ($.Files.Get $path)))) -}}
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
{{- $base := printf "%s-policies" (include "preemptguard.fullname" .) -}}
{{- $data := include "preemptguard.policyData" . | fromJson -}}
{{- printf "%s-%s" $base (include "preemptguard.kustomizeHash" (dict "kind" "ConfigMap" "name" "" "data" $data)) -}}
{{- end -}}

{{/* Self-managed certificates: checked once, here. */}}
{{- define "preemptguard.selfManaged" -}}
{{- $c := .Values.certificates.selfManaged -}}
{{- $issue := printf "preemptguard certs --service %s --namespace %s --out certs" (include "preemptguard.fullname" .) (include "preemptguard.namespace" .) -}}
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
{{- $base := printf "%s-tls" (include "preemptguard.fullname" .) -}}
{{- if has .Values.certificates.mode (list "cert-manager" "self-rotating") -}}
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
