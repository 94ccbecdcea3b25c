"""Mapping an API description to one of the paper's 7 domains.

The 7 domains follow the EnvFactory paper (arXiv 2605.18703, 85 environments across 7 domains),
with the project's own names for them. A spec votes with its ``x-apisguru-categories`` (weight 3 each)
and with keywords found in its title, description, tags and paths (weight 1 each).
"""

from __future__ import annotations

import re
from typing import Any

DOMAINS: tuple[str, ...] = (
    "travel_transport",
    "ecommerce_retail",
    "finance_payments",
    "productivity",
    "communication",
    "developer_tools",
    "knowledge_media_health",
)

DOMAIN_LABELS = {
    "travel_transport": "travel & transport",
    "ecommerce_retail": "e-commerce & retail",
    "finance_payments": "finance & payments",
    "productivity": "productivity: calendar, tasks, files",
    "communication": "communication & messaging",
    "developer_tools": "developer tools & collaboration",
    "knowledge_media_health": "knowledge, media & health",
}

CATEGORY_DOMAIN = {
    "transport": "travel_transport",
    "location": "travel_transport",
    "ecommerce": "ecommerce_retail",
    "marketing": "ecommerce_retail",
    "customer_relation": "ecommerce_retail",
    "financial": "finance_payments",
    "payment": "finance_payments",
    "project_management": "productivity",
    "time_management": "productivity",
    "forms": "productivity",
    "storage": "productivity",
    "enterprise": "productivity",
    "messaging": "communication",
    "email": "communication",
    "telecom": "communication",
    "social": "communication",
    "support": "communication",
    "developer_tools": "developer_tools",
    "collaboration": "developer_tools",
    "hosting": "developer_tools",
    "monitoring": "developer_tools",
    "backend": "developer_tools",
    "security": "developer_tools",
    "iot": "developer_tools",
    "tools": "developer_tools",
    "cloud": "developer_tools",
    "media": "knowledge_media_health",
    "entertainment": "knowledge_media_health",
    "open_data": "knowledge_media_health",
    "text": "knowledge_media_health",
    "education": "knowledge_media_health",
    "search": "knowledge_media_health",
    "machine_learning": "knowledge_media_health",
}

KEYWORDS = {
    "travel_transport": (
        "flight",
        "airline",
        "airport",
        "hotel",
        "travel",
        "trip",
        "booking",
        "transit",
        "vehicle",
        "parking",
        "rail",
        "train",
        "route",
        "itinerary",
        "shipment",
        "fleet",
    ),
    "ecommerce_retail": (
        "shop",
        "store",
        "cart",
        "product",
        "order",
        "inventory",
        "catalog",
        "retail",
        "merchant",
        "checkout",
        "coupon",
        "ecommerce",
        "customer",
    ),
    "finance_payments": (
        "payment",
        "invoice",
        "bank",
        "account",
        "transaction",
        "ledger",
        "accounting",
        "tax",
        "payout",
        "refund",
        "wallet",
        "loan",
        "billing",
        "expense",
    ),
    "productivity": (
        "calendar",
        "event",
        "task",
        "todo",
        "project",
        "file",
        "folder",
        "document",
        "note",
        "meeting",
        "schedule",
        "form",
        "spreadsheet",
        "timesheet",
        "timezone",
        "directory",
    ),
    "communication": (
        "message",
        "sms",
        "chat",
        "email",
        "mail",
        "call",
        "voice",
        "conversation",
        "contact",
        "notification",
        "channel",
        "fax",
        "ticket",
    ),
    "developer_tools": (
        "repository",
        "repo",
        "issue",
        "deploy",
        "build",
        "webhook",
        "api key",
        "pipeline",
        "server",
        "cluster",
        "commit",
        "monitor",
        "incident",
        "integration",
    ),
    "knowledge_media_health": (
        "health",
        "medical",
        "patient",
        "news",
        "article",
        "book",
        "music",
        "video",
        "movie",
        "podcast",
        "library",
        "course",
        "recipe",
        "image",
        "dataset",
        "knowledge",
        "knowledge graph",
    ),
}

_WORD = re.compile(r"[a-z]+")


def categories_of(info: dict[str, Any]) -> list[str]:
    """The ``x-apisguru-categories`` of a spec's ``info`` as a clean list.

    The corpus has odd values: a bare string instead of a list, and (in at least one spec) a list of
    single characters spelling one category; both are repaired, anything else non-string is dropped.
    """
    raw = info.get("x-apisguru-categories") if isinstance(info, dict) else None
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    values = [v.strip().lower() for v in raw if isinstance(v, str) and v.strip()]
    if values and all(len(v) == 1 for v in values):
        values = ["".join(values)]
    return values


def classify_domain(spec: dict[str, Any]) -> tuple[str | None, dict[str, int]]:
    """Return ``(domain or None, scores)`` for an OpenAPI document.

    ``None`` means no category and no keyword pointed anywhere. Ties go to the domain listed first
    in :data:`DOMAINS`.
    """
    info = spec.get("info") if isinstance(spec.get("info"), dict) else {}
    scores = dict.fromkeys(DOMAINS, 0)
    for cat in categories_of(info):
        if cat in CATEGORY_DOMAIN:
            scores[CATEGORY_DOMAIN[cat]] += 3
    text_parts = [str(info.get("title", "")), str(info.get("description", ""))[:2000]]
    tags = spec.get("tags")
    if isinstance(tags, list):
        text_parts += [str(t.get("name", "")) for t in tags[:50] if isinstance(t, dict)]
    paths = spec.get("paths")
    if isinstance(paths, dict):
        text_parts += [p for p in list(paths)[:200] if isinstance(p, str)]
    text = " ".join(text_parts).lower().replace("_", " ").replace("/", " ")
    words = set(_WORD.findall(text))
    for domain, keywords in KEYWORDS.items():
        for kw in keywords:
            if (" " in kw and kw in text) or kw in words or f"{kw}s" in words:
                scores[domain] += 1
    best = max(DOMAINS, key=lambda d: scores[d])
    return (best if scores[best] > 0 else None), scores
