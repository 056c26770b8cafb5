"""A small built-in table of EC2 on-demand prices, for the estimate `ltm aws up` prints.

Querying the AWS Pricing API would need extra permissions and a network round
trip for a number the user only has to eyeball, so a few common types are kept
here. Prices are us-east-1, Linux, on-demand, USD per hour; other regions differ
by a few percent.
"""

from __future__ import annotations

__all__ = ["HOURLY_USD", "PRICE_REGION", "cost_estimate", "hourly_price"]

PRICE_REGION = "us-east-1"

HOURLY_USD: dict[str, float] = {
    "t3.medium": 0.0416,
    "t3.large": 0.0832,
    "t3.xlarge": 0.1664,
    "t3.2xlarge": 0.3328,
    "t3a.large": 0.0752,
    "t3a.xlarge": 0.1504,
    "m5.large": 0.096,
    "m5.xlarge": 0.192,
    "m6i.large": 0.096,
    "m6i.xlarge": 0.192,
    "c5.large": 0.085,
    "c5.xlarge": 0.17,
    "c6i.large": 0.085,
    "c6i.xlarge": 0.17,
}

# T3/T3a run in "unlimited" credit mode by default: CPU-bound MPC can burn
# surplus credits, billed on top of the hourly price.
_BURSTABLE_PREFIXES = ("t2.", "t3.", "t3a.", "t4g.")
_SURPLUS_CREDIT_USD_PER_VCPU_HOUR = 0.05


def hourly_price(instance_type: str) -> float | None:
    """The on-demand hourly price of one instance, or None if the type is not in the table."""
    return HOURLY_USD.get(instance_type)


def cost_estimate(instance_type: str, count: int) -> str:
    """One line for the user: what ``count`` instances of ``instance_type`` cost per hour."""
    price = hourly_price(instance_type)
    if price is None:
        return (f"Estimated cost: unknown for {count} x {instance_type} "
                f"(not in the built-in price table; check the EC2 pricing page)")
    line = (f"Estimated cost: {count} x {instance_type} at ${price:.4f}/h = "
            f"${count * price:.4f}/h (on-demand, Linux, {PRICE_REGION}; other regions differ)")
    if instance_type.startswith(_BURSTABLE_PREFIXES):
        line += (f"; sustained full CPU may add up to ${_SURPLUS_CREDIT_USD_PER_VCPU_HOUR:.2f} "
                 "per vCPU-hour in unlimited credit mode")
    return line
