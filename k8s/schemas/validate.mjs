// Validates custom resources (JSON array on stdin) against validators generated from the published
// CRD schemas: Strimzi KafkaTopic / KafkaUser (kafka.strimzi.io/v1beta2), KEDA ScaledObject /
// TriggerAuthentication (keda.sh/v1alpha1) and prometheus-operator PodMonitor / PrometheusRule
// (monitoring.coreos.com/v1). Prints one JSON line {kind, name, error} per resource.
import { readFileSync } from "node:fs";
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject";
import { TriggerAuthentication } from "@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication";
import { KafkaTopic } from "@kubernetes-models/strimzi-kafka-operator/kafka.strimzi.io/v1beta2/KafkaTopic";
import { KafkaUser } from "@kubernetes-models/strimzi-kafka-operator/kafka.strimzi.io/v1beta2/KafkaUser";
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";

const models = {
  "kafka.strimzi.io/v1beta2/KafkaTopic": KafkaTopic,
  "kafka.strimzi.io/v1beta2/KafkaUser": KafkaUser,
  "monitoring.coreos.com/v1/PodMonitor": PodMonitor,
  "monitoring.coreos.com/v1/PrometheusRule": PrometheusRule,
  "keda.sh/v1alpha1/ScaledObject": ScaledObject,
  "keda.sh/v1alpha1/TriggerAuthentication": TriggerAuthentication,
};
for (const doc of JSON.parse(readFileSync(0, "utf8"))) {
  const Model = models[`${doc.apiVersion}/${doc.kind}`];
  let error = null;
  if (!Model) error = `no validator for ${doc.apiVersion}/${doc.kind}`;
  else {
    try { new Model(doc).validate(); } catch (e) { error = e.message; }
  }
  console.log(JSON.stringify({ kind: doc.kind, name: doc.metadata?.name ?? null, error }));
}
