"""Spot interruption rate per instance: the one place ``paddlefit cost`` (and ``train --spot-bucket``) get it from.

Per priced instance (:func:`spot_rate`):

1. a rate the user gave (``--interruptions-per-hour``, ``--spot-bucket``) applies to every instance;
2. else AWS instances take the published AWS Spot Instance Advisor bucket of their region and type
   (:mod:`paddlefit.catalog.spot_advisor`), converted by :func:`rate_from_bucket`;
3. else ``default (no published rate)``: :data:`DEFAULT_INTERRUPTIONS_PER_HOUR`, with the reason the cloud has
   none (:data:`NO_PUBLISHED_RATE`).

Conversion of a bucket (share f of instances reclaimed in a month; AWS: "the rate at which Spot has reclaimed
capacity during the trailing month") to a Poisson rate r per instance-hour: P(at least one interruption in a month)
= 1 - exp(-r x 730 h) = f, so r = -ln(1 - f) / 730 h and the mean time between interruptions is 1/r hours; f is the
bucket's upper edge (the pessimistic end), and 20% for ">20%" (its lower bound: no upper edge is published).
Example: 5-10% -> f = 0.10 -> r = 0.10536 / 730 h = 1.4433e-4 per hour -> MTBI 6,928.6 h.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paddlefit.catalog.price_csv import InstancePrice
from paddlefit.catalog.published import figure
from paddlefit.catalog.spot_advisor import ADVISOR_SOURCE, aws_bucket
from paddlefit.errors import PaddlefitError
from paddlefit.units import SECONDS_PER_HOUR

#: Hours in an average month (365 x 24 / 12), for AWS Spot Instance Advisor's per-month interruption buckets.
HOURS_PER_MONTH = 730.0
#: AWS Spot Instance Advisor "frequency of interruption" buckets -> the share of instances interrupted in a month
#: used here: the bucket's upper edge (the pessimistic end); ">20%" has no upper edge, 20% is its lower bound.
SPOT_BUCKETS = {"<5%": 0.05, "5-10%": 0.10, "10-15%": 0.15, "15-20%": 0.20, ">20%": 0.20}
#: Default interruption rate where no rate is published (``default_interruptions_per_hour`` in
#: ``catalog/data/published_figures.csv``): one per 24 h, the longest a GCP *preemptible* VM runs (GCP docs). GCP
#: *Spot* VMs have no maximum runtime (:data:`GCP_SPOT_DOCS`), so this is an assumption, not a measurement; give
#: the rate you see with --interruptions-per-hour.
DEFAULT_INTERRUPTIONS_PER_HOUR = figure("default_interruptions_per_hour").value
#: GCP: "preemptible VMs can only run for up to 24 hours at a time, but Spot VMs don't have a maximum runtime".
GCP_SPOT_DOCS = "https://cloud.google.com/compute/docs/instances/create-use-preemptible"
#: What a row without a published rate says in ``interruption_rate_source``.
DEFAULT_SOURCE = "default (no published rate)"
#: cloud -> why it has no published rate (shown with the default).
NO_PUBLISHED_RATE = {
    "gcp": f"GCP publishes no preemption rate; Spot VMs have no 24 h limit, preemptible VMs had ({GCP_SPOT_DOCS})",
    "azure": "Azure shows eviction-rate ranges only in the signed-in portal and Azure Resource Graph (SpotResources, "
    "needs a subscription): https://learn.microsoft.com/azure/virtual-machines/spot-vms",
    "aws": "this instance type and region are not in the shipped AWS Spot Instance Advisor extract",
    "lambda": "Lambda has no spot market",
    "runpod": "RunPod publishes no interruption rate for spot pods (https://docs.runpod.io/pods/pricing)",
}


@dataclass(frozen=True)
class InterruptionRate:
    """Spot interruptions per instance-hour (Poisson), how the number was obtained, and its source.

    Attributes:
        per_hour: interruptions per instance-hour (> 0).
        basis: the derivation, one sentence (bucket, conversion, or why the default).
        source: where the number comes from: the published data set, the option given, or
            :data:`DEFAULT_SOURCE`.
        label: a few words for a table note (``AWS Spot Instance Advisor 5-10%/month``), "" for a user's rate.
    """

    per_hour: float
    basis: str
    source: str = ""
    label: str = ""

    @property
    def mtbi_s(self) -> float:
        """Mean time between interruptions, seconds (3600 / per_hour)."""
        return SECONDS_PER_HOUR / self.per_hour

    @property
    def mtbi_h(self) -> float:
        """Mean time between interruptions, hours (1 / per_hour)."""
        return 1.0 / self.per_hour


def bucket_key(bucket: str) -> str:
    """``bucket`` normalised: spaces dropped and an en dash read as ``-`` (``'5 – 10%'`` -> ``'5-10%'``)."""
    return bucket.strip().replace(" ", "").replace("\u2013", "-")


def rate_from_bucket(bucket: str, source: str = "") -> InterruptionRate:
    """Convert an AWS Spot Instance Advisor bucket (share of instances interrupted per month) to a rate per hour.

    With Poisson interruptions at rate r per hour, P(at least one in a month) = 1 - exp(-r x 730 h) = f, so
    r = -ln(1 - f) / 730 h; f is the bucket's upper edge (:data:`SPOT_BUCKETS`). ``source`` defaults to
    ``--spot-bucket <bucket>``.

    Raises:
        PaddlefitError: an unknown bucket (the message names ``--spot-bucket`` and lists the valid ones).
    """
    key = bucket_key(bucket)
    if key not in SPOT_BUCKETS:
        raise PaddlefitError(
            f"`--spot-bucket {bucket}` is not an AWS Spot Instance Advisor bucket; use one of "
            f"{', '.join(repr(b) for b in SPOT_BUCKETS)}."
        )
    f = SPOT_BUCKETS[key]
    r = -math.log(1.0 - f) / HOURS_PER_MONTH
    edge = "its lower bound: the rate may be higher" if key == ">20%" else "upper edge"
    basis = (
        f"AWS Spot Instance Advisor bucket {key}: {f:.0%} of instances interrupted per month ({edge}); "
        f"Poisson: r = -ln(1 - {f:g}) / {HOURS_PER_MONTH:g} h = {r:.3g}/h, MTBI {1 / r:,.0f} h"
    )
    label = f"AWS Spot Instance Advisor {key}/month" + (" (at least: its lower edge)" if key == ">20%" else "")
    return InterruptionRate(r, basis, source or f"--spot-bucket {key}", label if source else "")


def default_rate(cloud: str) -> InterruptionRate:
    """:data:`DEFAULT_INTERRUPTIONS_PER_HOUR` for an instance of ``cloud`` with no published rate, saying why."""
    why = NO_PUBLISHED_RATE.get(cloud, f"{cloud} publishes no interruption rate")
    return InterruptionRate(
        DEFAULT_INTERRUPTIONS_PER_HOUR,
        f"{DEFAULT_SOURCE}: one interruption per 24 h assumed, the longest a GCP preemptible VM "
        f"runs; {why}; give your rate with --interruptions-per-hour",
        DEFAULT_SOURCE,
        DEFAULT_SOURCE,
    )


def spot_rate(row: InstancePrice, override: InterruptionRate | None = None) -> InterruptionRate:
    """The interruption rate of one priced instance: ``override`` (a rate the user gave) if any, else the
    published AWS Spot Instance Advisor bucket for (region, instance type) (:func:`rate_from_bucket`,
    :data:`~paddlefit.catalog.spot_advisor.ADVISOR_SOURCE`), else :func:`default_rate`."""
    if override is not None:
        return override
    if row.cloud == "aws":
        bucket = aws_bucket(row.region, row.instance_type)
        if bucket is not None:
            rate = rate_from_bucket(bucket, ADVISOR_SOURCE)
            return InterruptionRate(
                rate.per_hour, f"{row.region} {row.instance_type}: {rate.basis}", rate.source, rate.label
            )
    return default_rate(row.cloud)
