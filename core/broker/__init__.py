"""Delivery semantics on top of RQ: leases, the reaper, retries, the DLQ — each in its own module.

RQ alone marks a killed worker's job abandoned and never redelivers it; these modules add the
SQS-like visibility timeout the lesson teaches, with every step appended to the lab's event stream.
"""
