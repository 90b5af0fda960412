"""The series of the `serve` process outside the controller: the admission webhook's requests,
the policy file's reloads and the serving certificate's."""

from __future__ import annotations

from typing import Final

from quotaguard.metrics.registry import counter, gauge, histogram

# -- admission webhook ---------------------------------------------------------------------------
ADMISSION_REQUESTS: Final = counter(
    "quotaguard_admission_requests",
    "Admission requests answered, by operation (mutate/validate), object kind and result.",
    ["operation", "kind", "result"],
)
ADMISSION_DURATION: Final = histogram(
    "quotaguard_admission_duration_seconds",
    "Time from the end of reading the request body to the encoded response.",
    ["operation"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
)
ADMISSION_DENIALS: Final = counter(
    "quotaguard_admission_denials",
    "Objects denied, by tenant (empty: a namespace no tenant owns) and the policy rule that "
    "denied them; an object denied by two rules counts under both.",
    ["tenant", "reason"],
)
ADMISSION_IN_FLIGHT: Final = gauge(
    "quotaguard_admission_in_flight_requests",
    "Admission requests being handled right now.",
)

# -- policy file ---------------------------------------------------------------------------------
POLICY_RELOADS: Final = counter(
    "quotaguard_policy_reloads",
    "Policy files loaded and put in force (the first load included).",
)
POLICY_RELOAD_FAILURES: Final = counter(
    "quotaguard_policy_reload_failures",
    "Changed policy files refused (reason: invalid or unreadable); the last good policy stays.",
    ["reason"],
)
POLICY_GENERATION: Final = gauge(
    "quotaguard_policy_generation",
    "Generation of the policy in force: 1 after the first load, +1 on every accepted change.",
)

# -- webhook registrations -----------------------------------------------------------------------
REGISTRATIONS_UNSENT: Final = gauge(
    "quotaguard_registrations_unsent_resource_names",
    "1 for each resource name the policy governs that the webhook registrations in the cluster "
    "do not send (a pod asking only for it is neither queued nor checked); checked by the "
    "controller each interval.",
    ["resource"],
)

# -- serving certificate -------------------------------------------------------------------------
TLS_RELOADS: Final = counter(
    "quotaguard_tls_certificate_reloads",
    "Serving certificate/key pairs loaded (the first load included).",
)
TLS_RELOAD_FAILURES: Final = counter(
    "quotaguard_tls_certificate_reload_failures",
    "Changed certificate/key files refused (unreadable or not a matching pair).",
)
TLS_CERTIFICATE_EXPIRY: Final = gauge(
    "quotaguard_tls_certificate_expiry_timestamp_seconds",
    "notAfter of the serving certificate in force, as a Unix time.",
)

# Series that exist from the start, so dashboards and alerts see zeros rather than nothing.
for _operation in ("mutate", "validate"):
    ADMISSION_DURATION.labels(operation=_operation)
for _reason in ("invalid", "unreadable"):
    POLICY_RELOAD_FAILURES.labels(reason=_reason)
