"""AI services layer: an authenticated API over managed AI services, and a document-intelligence pipeline."""

from mlstack.constructs.ai_services.api import AiServiceApi, Guardrail
from mlstack.constructs.ai_services.document_pipeline import DocumentPipeline

__all__ = ["AiServiceApi", "DocumentPipeline", "Guardrail"]
