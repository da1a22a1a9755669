"""What an `ai_services:` section implies beyond its fields: the media bucket Transcribe needs, and the alarm topic
only the document pipeline has alarms for. `AiServicesStack`, the plan and the footprint read it."""

from __future__ import annotations

from mlstack.config.ai_services import AiServicesConfig


def needs_media_bucket(ai: AiServicesConfig) -> bool:
    """The API's `transcribe.start` reads media from, and writes transcripts to, a bucket of the stack."""
    return ai.api is not None and "transcribe.start" in ai.api.operations


def has_alarm_topic(ai: AiServicesConfig) -> bool:
    """The stack's alarm topic exists for the document pipeline's alarms (the API has none)."""
    return ai.document_pipeline is not None
