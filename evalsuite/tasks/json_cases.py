"""Procedural JSON-Schema cases: schemas from flat to nested/arrays/enums/ranges, and extraction passages with a
ground truth per field. Everything is generated from a ``random.Random`` so a seed fixes every case."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

KINDS = ("flat", "nested", "array", "enum", "range", "extract", "extract_nested")

FIRST = ("Maria", "James", "Aiko", "Omar", "Lena", "Tomas", "Priya", "Kofi", "Elena", "Rafael", "Ines", "Hugo",
         "Sofia", "Malik", "Yuki", "Nadia", "Pavel", "Grace", "Amir", "Clara", "Diego", "Freya", "Ravi", "Zara")
SYLL = ("bra", "kel", "mor", "tan", "vi", "lo", "den", "sar", "quo", "ri", "fen", "dal", "ost", "mer", "nu", "gal")
TOWN_SUFFIX = ("ford", "haven", "mouth", "by", "ton", "stad", "field", "port")
JOBS = ("nurse", "carpenter", "teacher", "pilot", "chemist", "baker", "architect", "librarian", "farmer")
HOBBIES = ("chess", "hiking", "painting", "cycling", "baking", "fishing", "singing", "gardening", "reading")
COLORS = ("red", "blue", "green", "black", "white", "yellow", "purple", "orange")
GOODS = ("lamp", "kettle", "backpack", "umbrella", "notebook", "headphones", "blender", "jacket")
GENRES = ("mystery", "romance", "science fiction", "history", "poetry", "fantasy")
CURRENCIES = ("USD", "EUR", "GBP")
STATUSES = ("pending", "shipped", "delivered", "cancelled")
EMPLOYMENT = ("full-time", "part-time", "retired", "student")


@dataclass(frozen=True)
class JsonCase:
    """One prompt: a schema, what to produce, and (for extraction) the passage and the right values."""

    kind: str
    entity: str
    schema: dict[str, Any]
    instruction: str
    passage: str | None = None
    truth: dict[str, Any] | None = None


def word(rng: random.Random, parts: int = 2) -> str:
    return "".join(rng.choice(SYLL) for _ in range(parts)).capitalize()


def town(rng: random.Random) -> str:
    return word(rng) + rng.choice(TOWN_SUFFIX)


def date(rng: random.Random) -> str:
    return f"{rng.randint(2020, 2030):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required or list(props),
            "additionalProperties": False}


STR = {"type": "string", "minLength": 1}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
NUM = {"type": "number"}


def _person(rng: random.Random) -> dict[str, Any]:
    first, last = rng.choice(FIRST), word(rng)
    return {"name": f"{first} {last}", "age": rng.randint(19, 88), "city": town(rng),
            "occupation": rng.choice(JOBS), "email": f"{first.lower()}.{last.lower()}@example.com",
            "is_member": rng.random() < 0.5, "employment": rng.choice(EMPLOYMENT),
            "hobbies": rng.sample(HOBBIES, rng.randint(2, 3)),
            "address": {"street": f"{rng.randint(1, 99)} {word(rng)} Street", "city": town(rng),
                        "zip": f"{rng.randint(10000, 99999)}"}}


def _person_text(v: dict[str, Any]) -> list[str]:
    member = "is a member of the local club" if v["is_member"] else "is not a member of the local club"
    return [f"{v['name']} is {v['age']} years old and works as a {v['occupation']} in {v['city']}.",
            f"{v['name'].split()[0]} {member} and is {v['employment']}.", f"Their email address is {v['email']}.",
            f"In their free time they enjoy {' and '.join(v['hobbies'])}.",
            f"They live at {v['address']['street']}, {v['address']['city']}, postal code {v['address']['zip']}."]


def _product(rng: random.Random) -> dict[str, Any]:
    return {"product_name": f"{word(rng)} {rng.choice(GOODS)}", "price": round(rng.uniform(5, 400), 2),
            "currency": rng.choice(CURRENCIES), "in_stock": rng.random() < 0.5, "quantity": rng.randint(0, 250),
            "color": rng.choice(COLORS), "tags": rng.sample(("sale", "new", "eco", "gift", "limited"), 2),
            "dimensions": {"width_cm": rng.randint(5, 90), "height_cm": rng.randint(5, 90)}}


def _product_text(v: dict[str, Any]) -> list[str]:
    stock = "in stock" if v["in_stock"] else "currently out of stock"
    return [f"Item: {v['product_name']}. It costs {v['price']} {v['currency']} and comes in {v['color']}.",
            f"It is {stock}; the warehouse lists a quantity of {v['quantity']}.",
            f"It is tagged {' and '.join(v['tags'])}.",
            f"It measures {v['dimensions']['width_cm']} cm wide and {v['dimensions']['height_cm']} cm high."]


def _event(rng: random.Random) -> dict[str, Any]:
    return {"event_name": f"{word(rng)} {rng.choice(('Festival', 'Summit', 'Fair', 'Concert'))}",
            "date": date(rng), "venue": f"{word(rng)} Hall", "attendees": rng.randint(20, 5000),
            "is_free": rng.random() < 0.5, "status": rng.choice(STATUSES), "city": town(rng),
            "speakers": [f"{rng.choice(FIRST)} {word(rng)}" for _ in range(2)],
            "organizer": {"name": f"{rng.choice(FIRST)} {word(rng)}", "phone": f"555-{rng.randint(1000, 9999)}"}}


def _event_text(v: dict[str, Any]) -> list[str]:
    free = "Entry is free." if v["is_free"] else "Entry requires a paid ticket."
    return [f"Event: {v['event_name']}. It takes place on {v['date']} at {v['venue']} in {v['city']}.",
            f"Organizers expect {v['attendees']} attendees. {free}",
            f"The speakers are {v['speakers'][0]} and {v['speakers'][1]}.",
            f"It is organized by {v['organizer']['name']} (phone {v['organizer']['phone']})."]


#: entity -> (value generator, passage sentences, schema per field)
ENTITIES: dict[str, tuple[Callable[[random.Random], dict], Callable[[dict], list[str]], dict[str, Any]]] = {
    "person": (_person, _person_text, {
        "name": STR, "age": {"type": "integer", "minimum": 0, "maximum": 120}, "city": STR, "occupation": STR,
        "email": {"type": "string", "format": "email"}, "is_member": BOOL,
        "employment": {"enum": list(EMPLOYMENT)},
        "hobbies": {"type": "array", "items": STR, "minItems": 2, "maxItems": 4},
        "address": obj({"street": STR, "city": STR, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}})}),
    "product": (_product, _product_text, {
        "product_name": STR, "price": {"type": "number", "exclusiveMinimum": 0}, "currency":
        {"enum": list(CURRENCIES)}, "in_stock": BOOL, "quantity": {"type": "integer", "minimum": 0},
        "color": STR, "tags": {"type": "array", "items": STR, "minItems": 1, "uniqueItems": True},
        "dimensions": obj({"width_cm": NUM, "height_cm": NUM})}),
    "event": (_event, _event_text, {
        "event_name": STR, "date": {"type": "string", "format": "date"}, "venue": STR,
        "attendees": {"type": "integer", "minimum": 0}, "is_free": BOOL, "status": {"enum": list(STATUSES)},
        "city": STR, "speakers": {"type": "array", "items": STR, "minItems": 2},
        "organizer": obj({"name": STR, "phone": STR})}),
}
SIMPLE = {"string", "integer", "boolean", "number"}


def _fields(entity: str, want: str, rng: random.Random, count: int) -> list[str]:
    """``count`` field names of an entity whose schema is of the wanted sort, in catalog order."""
    spec = ENTITIES[entity][2]

    def sort(s: dict[str, Any]) -> str:
        if "enum" in s:
            return "enum"
        return s["type"] if s["type"] in ("array", "object") else "simple"
    names = [k for k, s in spec.items() if sort(s) == want]
    chosen = set(rng.sample(names, min(count, len(names))))
    return [k for k in spec if k in chosen]


def _range_schema(entity: str, rng: random.Random) -> dict[str, Any]:
    """Simple fields with tightened numeric ranges and string lengths."""
    spec = ENTITIES[entity][2]
    props: dict[str, Any] = {}
    for key in _fields(entity, "simple", rng, 4):
        s = dict(spec[key])
        if s.get("type") in ("integer", "number"):
            low = rng.randint(1, 20)
            s.update(minimum=low, maximum=low + rng.randint(5, 60))
            s.pop("exclusiveMinimum", None)
        elif s.get("type") == "string" and "format" not in s:
            s.update(minLength=3, maxLength=rng.choice((12, 20, 30)))
        props[key] = s
    if not any(s.get("type") in ("integer", "number") for s in props.values()):
        props["rating"] = {"type": "integer", "minimum": 1, "maximum": 5}
    return obj(props)


def make_case(kind: str, rng: random.Random) -> JsonCase:
    """One case of the given kind."""
    entity = rng.choice(sorted(ENTITIES))
    gen, text, spec = ENTITIES[entity]
    pick = {"flat": [("simple", 3)], "nested": [("simple", 2), ("object", 1)], "array": [("simple", 2),
            ("array", 1)], "enum": [("enum", 1), ("simple", 2)], "extract": [("simple", 4)],
            "extract_nested": [("simple", 2), ("object", 1), ("array", 1)]}
    if kind == "range":
        schema = _range_schema(entity, rng)
    else:
        keys = [k for want, n in pick[kind] for k in _fields(entity, want, rng, n)]
        schema = obj({k: spec[k] for k in spec if k in keys})
    if not kind.startswith("extract"):
        return JsonCase(kind, entity, schema, f"Create a JSON object describing a fictional {entity}.")
    values = gen(rng)
    truth = {k: values[k] for k in schema["properties"]}
    return JsonCase(kind, entity, schema, f"Extract the {entity}'s details from the text into a JSON object.",
                    passage=" ".join(text(values)), truth=truth)
