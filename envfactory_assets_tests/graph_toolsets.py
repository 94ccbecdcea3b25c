"""Small, realistic tool sets shared by the tool-graph and sampler tests.

Shaped like ``envgen`` output (docs/design.md): CRUD tools per table, key fields named ``<singular>_id``,
list tools returning ``{"items": [row, ...]}``. Environments share real-world values the way real APIs do
(a contact's e-mail address is an invoice's billing address and a ticket's requester; an invoice's due date
can end a calendar event), and also identifiers (``company_id`` in CRM and billing, ``org_id`` in support)
that must never link them.
"""

from __future__ import annotations

import copy

CRM = "apideck_com__crm"
MAIL = "gmail_com__mail"
BILLING = "stripe_com__billing"
CALENDAR = "google_com__calendar"
SUPPORT = "zendesk_com__support"


def _s(description: str, **extra) -> dict:
    return {"type": "string", "description": description, **extra}


def _obj(properties: dict, required: list[str] | None = None) -> dict:
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _tool(env_id, domain, name, description, kind, table, input_schema, output_schema):
    return {
        "env_id": env_id,
        "domain": domain,
        "name": name,
        "description": description,
        "kind": kind,
        "table": table,
        "read_only": kind in ("list", "get"),
        "input_schema": input_schema,
        "output_schema": output_schema,
    }


COMPANY_ROW = {
    "company_id": _s("Unique identifier of the company"),
    "name": _s("Company name"),
    "industry": _s("Industry the company operates in"),
    "employee_count": {"type": "integer", "description": "Number of employees"},
}
CONTACT_ROW = {
    "contact_id": _s("Unique identifier of the contact"),
    "company_id": _s("Unique identifier of the company"),
    "name": _s("Full name of the contact person"),
    "email": _s("Email address of the contact", format="email"),
}


def crm_tools() -> list[dict]:
    d = "productivity"
    return [
        _tool(
            CRM,
            d,
            "list_companies",
            "List companies",
            "list",
            "companies",
            _obj(
                {
                    "industry": _s("Filter by industry"),
                    "limit": {"type": "integer", "description": "Maximum number of results"},
                }
            ),
            _obj(
                {
                    "items": {"type": "array", "items": _obj(COMPANY_ROW, ["company_id", "name"])},
                    "total": {"type": "integer", "description": "Total number of matching companies"},
                }
            ),
        ),
        _tool(
            CRM,
            d,
            "get_company",
            "Get one company",
            "get",
            "companies",
            _obj({"company_id": COMPANY_ROW["company_id"]}, ["company_id"]),
            _obj(COMPANY_ROW),
        ),
        _tool(
            CRM,
            d,
            "create_company",
            "Create a company",
            "create",
            "companies",
            _obj(
                {
                    "name": COMPANY_ROW["name"],
                    "industry": COMPANY_ROW["industry"],
                    "employee_count": COMPANY_ROW["employee_count"],
                },
                ["name"],
            ),
            _obj(COMPANY_ROW),
        ),
        _tool(
            CRM,
            d,
            "update_company",
            "Update a company",
            "update",
            "companies",
            _obj(
                {
                    "company_id": COMPANY_ROW["company_id"],
                    "industry": COMPANY_ROW["industry"],
                    "employee_count": COMPANY_ROW["employee_count"],
                },
                ["company_id"],
            ),
            _obj(COMPANY_ROW),
        ),
        _tool(
            CRM,
            d,
            "delete_company",
            "Delete a company",
            "delete",
            "companies",
            _obj({"company_id": COMPANY_ROW["company_id"]}, ["company_id"]),
            _obj({"deleted": {"type": "boolean", "description": "Whether the row was deleted"}}),
        ),
        _tool(
            CRM,
            d,
            "list_contacts",
            "List contacts, optionally of one company",
            "list",
            "contacts",
            _obj({"company_id": COMPANY_ROW["company_id"]}),
            _obj({"items": {"type": "array", "items": _obj(CONTACT_ROW)}}),
        ),
        _tool(
            CRM,
            d,
            "get_contact",
            "Get one contact",
            "get",
            "contacts",
            _obj({"contact_id": CONTACT_ROW["contact_id"]}, ["contact_id"]),
            _obj(CONTACT_ROW),
        ),
        _tool(
            CRM,
            d,
            "create_contact",
            "Create a contact at a company",
            "create",
            "contacts",
            _obj(
                {"company_id": CONTACT_ROW["company_id"], "name": CONTACT_ROW["name"], "email": CONTACT_ROW["email"]},
                ["company_id", "name", "email"],
            ),
            _obj(CONTACT_ROW),
        ),
        _tool(
            CRM,
            d,
            "delete_contact",
            "Delete a contact",
            "delete",
            "contacts",
            _obj({"contact_id": CONTACT_ROW["contact_id"]}, ["contact_id"]),
            _obj({"deleted": {"type": "boolean", "description": "Whether the row was deleted"}}),
        ),
    ]


MESSAGE_ROW = {
    "message_id": _s("Unique identifier of the email message"),
    "thread_id": _s("Identifier of the conversation thread"),
    "to": _s("Recipient email address", format="email"),
    "subject": _s("Subject line of the email"),
    "body": _s("Plain-text body of the email"),
    "sent_at": _s("When the message was sent", format="date-time"),
}


def mail_tools() -> list[dict]:
    d = "communication"
    return [
        _tool(
            MAIL,
            d,
            "send_email",
            "Send an email",
            "create",
            "messages",
            _obj(
                {"to": MESSAGE_ROW["to"], "subject": MESSAGE_ROW["subject"], "body": MESSAGE_ROW["body"]},
                ["to", "subject", "body"],
            ),
            _obj(MESSAGE_ROW),
        ),
        _tool(
            MAIL,
            d,
            "list_messages",
            "List messages in the mailbox",
            "list",
            "messages",
            _obj(
                {
                    "query": _s("Search query over subject and body"),
                    "folder": _s("Mailbox folder", enum=["inbox", "sent", "archive"]),
                }
            ),
            _obj({"items": {"type": "array", "items": _obj(MESSAGE_ROW)}}),
        ),
        _tool(
            MAIL,
            d,
            "get_message",
            "Read one message",
            "get",
            "messages",
            _obj({"message_id": MESSAGE_ROW["message_id"]}, ["message_id"]),
            _obj(MESSAGE_ROW),
        ),
        _tool(
            MAIL,
            d,
            "reply_to_message",
            "Reply in the thread of a message",
            "create",
            "messages",
            _obj({"message_id": MESSAGE_ROW["message_id"], "body": MESSAGE_ROW["body"]}, ["message_id", "body"]),
            _obj(MESSAGE_ROW),
        ),
        _tool(
            MAIL,
            d,
            "archive_message",
            "Move a message to the archive",
            "update",
            "messages",
            _obj({"message_id": MESSAGE_ROW["message_id"]}, ["message_id"]),
            _obj(MESSAGE_ROW),
        ),
    ]


INVOICE_ROW = {
    "invoice_id": _s("Unique identifier of the invoice"),
    "company_id": _s("Unique identifier of the company"),
    "amount_cents": {"type": "integer", "description": "Invoice total in cents"},
    "currency": _s("Three-letter ISO currency code", enum=["usd", "eur", "gbp"]),
    "status": _s("Invoice status", enum=["draft", "open", "paid", "void"]),
    "due_date": _s("Payment due date", format="date"),
    "billing_email": _s("E-mail address the invoice is sent to", format="email"),
}


def billing_tools() -> list[dict]:
    d = "finance"
    return [
        _tool(
            BILLING,
            d,
            "create_invoice",
            "Create an invoice for a company",
            "create",
            "invoices",
            _obj(
                {
                    "company_id": INVOICE_ROW["company_id"],
                    "amount_cents": INVOICE_ROW["amount_cents"],
                    "currency": INVOICE_ROW["currency"],
                    "due_date": INVOICE_ROW["due_date"],
                    "billing_email": INVOICE_ROW["billing_email"],
                },
                ["company_id", "amount_cents", "currency"],
            ),
            _obj(INVOICE_ROW),
        ),
        _tool(
            BILLING,
            d,
            "get_invoice",
            "Get one invoice",
            "get",
            "invoices",
            _obj({"invoice_id": INVOICE_ROW["invoice_id"]}, ["invoice_id"]),
            _obj(INVOICE_ROW),
        ),
        _tool(
            BILLING,
            d,
            "list_invoices",
            "List invoices",
            "list",
            "invoices",
            _obj({"status": INVOICE_ROW["status"]}),
            _obj({"items": {"type": "array", "items": _obj(INVOICE_ROW)}}),
        ),
        _tool(
            BILLING,
            d,
            "void_invoice",
            "Void an open invoice",
            "update",
            "invoices",
            _obj({"invoice_id": INVOICE_ROW["invoice_id"]}, ["invoice_id"]),
            _obj(INVOICE_ROW),
        ),
    ]


EVENT_ROW = {
    "event_id": _s("Unique identifier of the calendar event"),
    "title": _s("Title of the event"),
    "start_time": _s("Event start time", format="date-time"),
    "end_time": _s("Event end time", format="date-time"),
    "location": _s("Where the event takes place"),
}


def calendar_tools() -> list[dict]:
    d = "productivity"
    return [
        _tool(
            CALENDAR,
            d,
            "create_event",
            "Create a calendar event",
            "create",
            "events",
            _obj(
                {
                    "title": EVENT_ROW["title"],
                    "start_time": EVENT_ROW["start_time"],
                    "end_time": EVENT_ROW["end_time"],
                    "location": EVENT_ROW["location"],
                },
                ["title", "start_time", "end_time"],
            ),
            _obj(EVENT_ROW),
        ),
        _tool(
            CALENDAR,
            d,
            "get_event",
            "Get one event",
            "get",
            "events",
            _obj({"event_id": EVENT_ROW["event_id"]}, ["event_id"]),
            _obj(EVENT_ROW),
        ),
        _tool(
            CALENDAR,
            d,
            "list_events",
            "List events in a time range",
            "list",
            "events",
            _obj({"start_after": _s("Only events starting after this time", format="date-time")}),
            _obj({"items": {"type": "array", "items": _obj(EVENT_ROW)}}),
        ),
        _tool(
            CALENDAR,
            d,
            "cancel_event",
            "Cancel an event",
            "delete",
            "events",
            _obj({"event_id": EVENT_ROW["event_id"]}, ["event_id"]),
            _obj({"deleted": {"type": "boolean", "description": "Whether the row was deleted"}}),
        ),
    ]


TICKET_ROW = {
    "ticket_id": _s("Unique identifier of the support ticket"),
    # Same meaning as CRM's company_id, different name: only the embedding can join them.
    "org_id": _s("Unique identifier of the company"),
    "subject": _s("Short summary of the customer's problem"),
    "priority": _s("Ticket priority", enum=["low", "normal", "high", "urgent"]),
    "status": _s("Ticket status", enum=["open", "pending", "solved", "closed"]),
    "requester_email": _s("E-mail address of the customer who asked for help", format="email"),
}


def support_tools() -> list[dict]:
    d = "customer_support"
    return [
        _tool(
            SUPPORT,
            d,
            "create_ticket",
            "Open a support ticket for a company",
            "create",
            "tickets",
            _obj(
                {
                    "org_id": TICKET_ROW["org_id"],
                    "subject": TICKET_ROW["subject"],
                    "priority": TICKET_ROW["priority"],
                    "requester_email": TICKET_ROW["requester_email"],
                },
                ["org_id", "subject"],
            ),
            _obj(TICKET_ROW),
        ),
        _tool(
            SUPPORT,
            d,
            "get_ticket",
            "Get one ticket",
            "get",
            "tickets",
            _obj({"ticket_id": TICKET_ROW["ticket_id"]}, ["ticket_id"]),
            _obj(TICKET_ROW),
        ),
        _tool(
            SUPPORT,
            d,
            "list_tickets",
            "List tickets, optionally of one company",
            "list",
            "tickets",
            _obj({"org_id": TICKET_ROW["org_id"], "status": TICKET_ROW["status"]}),
            _obj({"items": {"type": "array", "items": _obj(TICKET_ROW)}}),
        ),
        _tool(
            SUPPORT,
            d,
            "close_ticket",
            "Close a ticket",
            "update",
            "tickets",
            _obj({"ticket_id": TICKET_ROW["ticket_id"]}, ["ticket_id"]),
            _obj(TICKET_ROW),
        ),
    ]


def all_tools() -> list[dict]:
    """CRM + mail + billing + calendar + support: 26 tools in 5 environments."""
    return copy.deepcopy(crm_tools() + mail_tools() + billing_tools() + calendar_tools() + support_tools())
