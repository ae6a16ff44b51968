#!/usr/bin/env python3
"""Writes the prompt sets of the speculative-decoding benchmark (issue #48, scripts/bench-speculative).

bench/data/speculative_copy_prompts.jsonl: 50 chat prompts whose answers copy from their input,
the case prompt lookup (n-gram speculation) is for:
  json_edit  a JSON document (an order, a user, a service config; 10-25 fields) with one field to
             change, answered with the whole document
  typo_fix   a paragraph (80-200 words) with one misspelt word, answered with the whole paragraph
  extract    a text (an email, a ticket, a listing) and the fields to pull out of it, answered
             with "key: value" lines that quote the text
bench/data/speculative_story_prompts.jsonl: 64 free-text prompts ("Write a story about ..."),
the form the integration tests and the serving checks ask for stories in, where the answer
copies little from the prompt and speculation must not cost.

One JSON object a line: {"id", "kind", "messages": [{"role": "user", "content"}], "max_tokens"}.
Everything comes from hand-written word lists and templates and a fixed seed, so the files are
the same on every run (no network, no model). max_tokens is 1.3x an estimate of the expected
answer's tokens (words, punctuation and digits counted apart, as small BPE vocabularies split
them), capped at 400, so a model that copies faithfully finishes before its limit.

Usage: .venv/bin/python tools/gen_speculative_prompts.py [--out-dir bench/data]
"""

import argparse
import json
import math
import os
import random
import re

SEED = 48  # the number; change it and the committed files change

FIRST = ["Alice", "Bruno", "Chen", "Dana", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jonas",
         "Keiko", "Liam", "Maya", "Nikos", "Olga", "Pedro", "Quinn", "Rosa", "Sven", "Tara",
         "Umar", "Vera", "Wen", "Yusuf", "Zoe"]
LAST = ["Anders", "Baker", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Hughes", "Ivanova",
        "Jensen", "Kowalski", "Lopez", "Moreau", "Nakamura", "Okafor", "Petrov", "Rossi",
        "Schmidt", "Tanaka", "Vargas", "Walsh", "Young"]
CITIES = [("Lisbon", "Portugal", "1100-148"), ("Lyon", "France", "69002"),
          ("Leeds", "United Kingdom", "LS1 4AP"), ("Porto", "Portugal", "4000-322"),
          ("Graz", "Austria", "8010"), ("Ghent", "Belgium", "9000"),
          ("Utrecht", "Netherlands", "3511 LX"), ("Bergen", "Norway", "5003"),
          ("Turin", "Italy", "10121"), ("Seville", "Spain", "41004"),
          ("Krakow", "Poland", "31-008"), ("Aarhus", "Denmark", "8000"),
          ("Denver", "United States", "80202"), ("Toronto", "Canada", "M5V 2T6")]
STREETS = ["Maple Street", "Harbour Road", "Station Avenue", "Mill Lane", "Church Street",
           "Riverside Drive", "Market Square", "Oak Terrace", "Canal Walk", "Hill Road"]
DOMAINS = ["example.com", "mail.example.org", "corp.example.net", "shop.example.io"]
PRODUCTS = [("Ceramic coffee mug", 12.5), ("Wireless mouse", 24.99), ("Desk lamp", 39.0),
            ("Notebook, A5 dotted", 6.75), ("USB-C cable, 2 m", 9.99), ("Water bottle", 18.0),
            ("Mechanical keyboard", 89.0), ("Laptop stand", 45.5), ("Noise-cancelling headphones", 149.0),
            ("Fountain pen", 32.0), ("Yoga mat", 27.5), ("Cast iron pan", 54.0),
            ("Backpack, 20 l", 64.9), ("Phone case", 15.0), ("Bluetooth speaker", 59.99)]
COMPANIES = ["Northwind Traders", "Bluebird Logistics", "Harbor Analytics", "Greenleaf Foods",
             "Summit Outdoor", "Copperline Media", "Lakeside Dental", "Redwood Software",
             "Ironbridge Consulting", "Silver Fern Travel"]
JOBS = ["data analyst", "store manager", "backend engineer", "nurse", "accountant",
        "product designer", "warehouse supervisor", "teacher", "site engineer", "translator"]
SERVICES = ["billing-api", "search-indexer", "auth-gateway", "report-worker", "image-resizer",
            "notification-service", "inventory-sync", "checkout-web"]
REGIONS = ["eu-west-1", "eu-central-1", "us-east-2", "ap-southeast-1"]


def person(rng):
    first, last = rng.choice(FIRST), rng.choice(LAST)
    return first, last, f"{first.lower()}.{last.lower()}@{rng.choice(DOMAINS)}"


def phone(rng):
    return f"+{rng.choice([33, 44, 49, 351, 39, 34, 31, 1])} {rng.randint(100, 999)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}"


def date(rng, year=2024):
    return f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def estimate_tokens(text):
    # Words, each punctuation mark and each digit apart: about what SmolLM2's and Gemma's
    # tokenizers make of JSON and prose (both split numbers into single digits).
    return len(re.findall(r"[A-Za-z]+|\d|[^\sA-Za-z\d]", text))


def max_tokens_for(answer):
    return min(400, math.ceil(1.3 * estimate_tokens(answer)) + 8)


# ---- json_edit ---------------------------------------------------------------------------

def order_doc(rng):
    first, last, email = person(rng)
    city, country, postcode = rng.choice(CITIES)
    items = rng.sample(PRODUCTS, rng.randint(1, 2))
    lines = []
    for name, price in items:
        lines.append({"sku": f"SKU-{rng.randint(10000, 99999)}", "name": name,
                      "quantity": rng.randint(1, 4), "unit_price": price})
    subtotal = round(sum(i["quantity"] * i["unit_price"] for i in lines), 2)
    shipping = rng.choice([0.0, 4.95, 7.5])
    doc = {
        "order_id": f"ORD-{rng.randint(100000, 999999)}",
        "created_at": f"{date(rng)}T{rng.randint(8, 21):02d}:{rng.randint(0, 59):02d}:00Z",
        "status": rng.choice(["pending", "paid", "packed"]),
        "customer": {"name": f"{first} {last}", "email": email, "phone": phone(rng)},
        "shipping_address": {"street": f"{rng.randint(1, 180)} {rng.choice(STREETS)}",
                             "city": city, "postcode": postcode, "country": country},
        "items": lines,
        "currency": "EUR" if country not in ("United States", "Canada", "United Kingdom") else
                    {"United States": "USD", "Canada": "CAD", "United Kingdom": "GBP"}[country],
        "subtotal": subtotal,
        "shipping": shipping,
        "total": round(subtotal + shipping, 2),
        "gift_wrap": rng.random() < 0.3,
        "notes": rng.choice(["Leave at the front door.", "Call before delivery.", "",
                             "Deliver after 5 pm, please."]),
    }
    edits = [
        ("status", "\"shipped\"", ["status"], None),
        ("the customer's phone number", f"\"{phone(rng)}\"", ["customer", "phone"], None),
        ("the shipping city", f"\"{rng.choice(CITIES)[0]}\"", ["shipping_address", "city"], None),
        ("gift_wrap", "true" if not doc["gift_wrap"] else "false", ["gift_wrap"], None),
        ("notes", "\"Ring the bell twice.\"", ["notes"], None),
        ("the street of the shipping address", f"\"{rng.randint(1, 180)} {rng.choice(STREETS)}\"",
         ["shipping_address", "street"], None),
    ]
    return "an online shop's order", doc, edits


def user_doc(rng):
    first, last, email = person(rng)
    city, country, _ = rng.choice(CITIES)
    doc = {
        "id": rng.randint(10000, 99999),
        "username": f"{first.lower()}{rng.randint(1, 99)}",
        "first_name": first,
        "last_name": last,
        "email": email,
        "phone": phone(rng),
        "date_of_birth": date(rng, rng.randint(1960, 2002)),
        "city": city,
        "country": country,
        "company": rng.choice(COMPANIES),
        "job_title": rng.choice(JOBS),
        "language": rng.choice(["en", "fr", "de", "pt", "es", "it", "nl"]),
        "timezone": rng.choice(["Europe/Lisbon", "Europe/Paris", "Europe/London", "America/Denver"]),
        "newsletter": rng.random() < 0.5,
        "two_factor_enabled": rng.random() < 0.6,
        "roles": rng.sample(["viewer", "editor", "billing", "admin", "support"], rng.randint(1, 3)),
        "created_at": date(rng, rng.randint(2018, 2023)),
        "last_login": date(rng),
        "login_count": rng.randint(3, 2400),
    }
    for key in rng.sample(["phone", "company", "timezone", "login_count"], rng.randint(0, 3)):
        del doc[key]
    edits = [
        ("email", f"\"{first.lower()}.{last.lower()}@{rng.choice(DOMAINS)}\"".replace("@", "+work@"),
         ["email"], None),
        ("city", f"\"{rng.choice(CITIES)[0]}\"", ["city"], None),
        ("job_title", f"\"senior {rng.choice(JOBS)}\"", ["job_title"], None),
        ("newsletter", "false" if doc["newsletter"] else "true", ["newsletter"], None),
        ("language", "\"en\"" if doc["language"] != "en" else "\"fr\"", ["language"], None),
        ("last_name", f"\"{rng.choice(LAST)}\"", ["last_name"], None),
    ]
    return "a user account", doc, edits


def config_doc(rng):
    service = rng.choice(SERVICES)
    doc = {
        "service": service,
        "version": f"{rng.randint(1, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}",
        "environment": rng.choice(["staging", "production"]),
        "region": rng.choice(REGIONS),
        "replicas": rng.randint(2, 12),
        "port": rng.choice([8080, 8443, 9000, 3000]),
        "log_level": rng.choice(["info", "warn", "debug"]),
        "database": {"host": f"{service}-db.internal", "port": 5432,
                     "name": service.replace("-", "_"), "pool_size": rng.choice([10, 20, 50]),
                     "ssl": True},
        "cache": {"enabled": rng.random() < 0.7, "ttl_seconds": rng.choice([60, 300, 900, 3600])},
        "timeouts": {"connect_ms": rng.choice([500, 1000, 2000]),
                     "read_ms": rng.choice([5000, 10000, 30000])},
        "feature_flags": {"new_checkout": rng.random() < 0.5, "beta_search": rng.random() < 0.5},
        "health_check_path": "/healthz",
        "owner_team": rng.choice(["payments", "search", "platform", "growth"]),
    }
    edits = [
        ("replicas", str(doc["replicas"] + rng.randint(1, 4)), ["replicas"], None),
        ("log_level", "\"error\"", ["log_level"], None),
        ("the database pool_size", str(rng.choice([25, 40, 100])), ["database", "pool_size"], None),
        ("the cache ttl_seconds", str(rng.choice([120, 600, 1800])), ["cache", "ttl_seconds"], None),
        ("the read timeout read_ms", str(rng.choice([15000, 45000, 60000])), ["timeouts", "read_ms"], None),
        ("the feature flag new_checkout", "true" if not doc["feature_flags"]["new_checkout"] else "false",
         ["feature_flags", "new_checkout"], None),
    ]
    return "a service's deployment configuration", doc, edits


def leaf_count(value):
    if isinstance(value, dict):
        return sum(leaf_count(v) for v in value.values())
    if isinstance(value, list):
        return sum(leaf_count(v) for v in value)
    return 1


def json_edit(rng, index):
    what, doc, edits = [order_doc, user_doc, config_doc][index % 3](rng)
    assert 10 <= leaf_count(doc) <= 25, (what, leaf_count(doc))
    label, value, path, _ = rng.choice(edits)
    edited = json.loads(json.dumps(doc))
    target = edited
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = json.loads(value)
    indent = 2
    source = json.dumps(doc, indent=indent)
    answer = json.dumps(edited, indent=indent)
    content = (f"Here is {what} as JSON:\n\n```json\n{source}\n```\n\n"
               f"Change {label} to {value}. Output the whole updated JSON document, with every "
               f"other field unchanged, and nothing else.")
    return content, answer


# ---- typo_fix ----------------------------------------------------------------------------

# Topics of a few sentences each; {name}, {town}, {n}, {m}, {day} are filled in per paragraph.
TOPICS = [
    ["The community garden on the edge of {town} opened its gates again this spring.",
     "Volunteers spent {n} weekends clearing weeds, repairing the fences and building new raised beds.",
     "{name}, who has looked after the tomatoes for years, says the soil has never been better.",
     "Families can rent a small plot for the whole season, and the waiting list is already long.",
     "Every {day} morning there is a short workshop on composting, watering and saving seeds.",
     "Children from the nearby school grow beans and sunflowers in a corner set aside for them.",
     "Last year the garden gave more than {m} kilograms of vegetables to the local food bank.",
     "The organisers hope to add a greenhouse and a rainwater tank before the autumn.",
     "Anyone who wants to help is welcome, even for an hour, and no experience is needed."],
    ["The old railway station in {town} has been turned into a small public library.",
     "The ticket hall now holds the children's books, and the waiting room is a quiet reading space.",
     "Architects kept the original clock, the wooden benches and the tiled floor.",
     "{name}, the head librarian, says visitor numbers have tripled since the move.",
     "The library lends about {m} books a month and runs a reading club every {day}.",
     "Students come in the evenings because the building stays open until nine o'clock.",
     "A café on the former platform serves coffee, soup and cakes baked in the village.",
     "Trains still pass a few times an hour, which most readers say they hardly notice.",
     "The council plans to restore the signal box next year as a space for exhibitions."],
    ["Our team released version {n}.{m} of the reporting tool on {day}.",
     "The most visible change is a faster dashboard that loads large projects in a few seconds.",
     "Exports to spreadsheets now keep the column widths, the number formats and the filters.",
     "We also fixed a problem where scheduled reports were sometimes sent twice.",
     "{name} rewrote the search so that it finds results across archived projects as well.",
     "Administrators can now decide which teams may share reports outside the company.",
     "The update is installed automatically, and no action is needed from most customers.",
     "If you notice anything unusual, please contact support and describe what you were doing.",
     "We would like to thank everyone who tested the early builds and sent us feedback."],
    ["The mountain trail above {town} is one of the most popular walks in the region.",
     "It climbs about {m} metres through pine forest before reaching an open ridge.",
     "On a clear day walkers can see the lake, the river valley and the peaks beyond.",
     "The full loop takes around {n} hours, including a stop at the shelter near the top.",
     "{name}, a local guide, recommends starting early to avoid the afternoon heat.",
     "Good boots are essential, because the path is rocky and can be slippery after rain.",
     "There is no water on the route, so every walker should carry enough for the day.",
     "Dogs are allowed, but they must stay on a lead while sheep are grazing on the ridge.",
     "The trail is closed in winter, when snow covers the markers and the upper section."],
    ["The bakery on the main square of {town} has made bread the same way for {n} years.",
     "Its ovens are lit before four in the morning, long before the first customers arrive.",
     "{name} learned the recipes from her grandmother and still weighs every batch by hand.",
     "The sourdough rises slowly overnight, which gives the crust its deep colour and flavour.",
     "On {day} there is a queue outside the door for the cinnamon rolls and the rye loaves.",
     "The bakery sells about {m} loaves a week and supplies several restaurants in the area.",
     "Nothing is wasted: bread left at closing time goes to a shelter across the street.",
     "Apprentices spend two years learning to shape, score and bake each kind of loaf.",
     "The owners say they have no plans to open a second shop or to change the recipes."],
    ["The city museum in {town} has opened a new gallery about the history of the harbour.",
     "It tells the story of the fishermen, merchants and shipbuilders who lived by the water.",
     "Visitors can walk through a rebuilt workshop where boats were made by hand.",
     "The collection includes maps, letters, tools and more than {m} photographs.",
     "{name}, the curator, spent {n} years gathering objects from families in the region.",
     "A large model shows how the harbour looked before the great storm changed its shape.",
     "Guided tours run every {day} afternoon and are free for children under twelve.",
     "The gallery also has a quiet room where visitors can listen to recorded memories.",
     "The museum hopes the exhibition will bring more young people into its halls."],
    ["The regional hospital in {town} has finished moving into its new building.",
     "The move took {n} days and was planned so that no patient missed an appointment.",
     "The new wards have larger rooms, more daylight and space for a relative to stay overnight.",
     "{name}, the director of nursing, says staff helped design the layout of each floor.",
     "The emergency department now has its own entrance and a separate children's area.",
     "About {m} people work in the building, and many of them now come by bicycle or bus.",
     "Visiting hours have been extended, and the café is open every day including {day}.",
     "The old building will be turned into housing for students and young families.",
     "Patients are asked to check their letters for the new address of each clinic."],
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
TOWNS = ["Ashford", "Bellhaven", "Cromer", "Dunmore", "Elmstead", "Fairlie", "Glenrock",
         "Hollins", "Kestrel Bay", "Lindfield", "Marwick", "Northam"]


def paragraph(rng, topic, low=80, high=200):
    fill = {"name": f"{rng.choice(FIRST)} {rng.choice(LAST)}", "town": rng.choice(TOWNS),
            "n": rng.randint(2, 9), "m": rng.randint(120, 980), "day": rng.choice(DAYS)}
    target = rng.randint(low, high)
    sentences = []
    words = 0
    for sentence in topic:
        if words >= target:
            break
        text = sentence.format(**fill)
        sentences.append(text)
        words += len(text.split())
    return " ".join(sentences)


def misspell(rng, word):
    i = rng.randint(1, len(word) - 3)
    kind = rng.choice(["swap", "drop", "double", "vowel"])
    if kind == "swap":
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == "drop":
        return word[:i] + word[i + 1:]
    if kind == "double":
        return word[:i] + word[i] + word[i:]
    vowels = [j for j in range(1, len(word) - 1) if word[j] in "aeiou"]
    j = rng.choice(vowels) if vowels else i
    return word[:j] + rng.choice([v for v in "aeiou" if v != word[j]]) + word[j + 1:]


def typo_fix(rng, index):
    topic = TOPICS[index % len(TOPICS)]
    text = paragraph(rng, topic)
    while len(text.split()) < 80:
        text += " " + paragraph(rng, rng.choice(TOPICS), 20, 40)
    tokens = text.split(" ")
    candidates = [k for k, t in enumerate(tokens) if t.isalpha() and t.islower() and len(t) >= 6]
    k = rng.choice(candidates)
    wrong = misspell(rng, tokens[k])
    while wrong == tokens[k]:
        wrong = misspell(rng, tokens[k])
    broken = " ".join(tokens[:k] + [wrong] + tokens[k + 1:])
    # Measured on SmolLM2-135M: this wording has it write the paragraph out (a longer
    # instruction had it restate the instruction instead).
    content = "Correct the spelling in this text and write out the corrected text in full:\n\n" + broken
    return content, text


# ---- extract -----------------------------------------------------------------------------

def extract_email(rng):
    first, last, email = person(rng)
    company = rng.choice(COMPANIES)
    city, country, postcode = rng.choice(CITIES)
    street = f"{rng.randint(1, 180)} {rng.choice(STREETS)}"
    order = f"ORD-{rng.randint(100000, 999999)}"
    product, price = rng.choice(PRODUCTS)
    when = date(rng)
    tel = phone(rng)
    reason = rng.choice(["the box arrived damaged and one corner of the item is cracked",
                         "the colour is different from the one shown on the website",
                         "I received two of them although I ordered only one",
                         "it stopped working after three days of normal use"])
    text = (f"Hello,\n\nMy name is {first} {last} and I work at {company}. On {when} I ordered a "
            f"{product.lower()} (order {order}, {price:.2f} EUR), but {reason}. I would like a "
            f"replacement sent to {street}, {postcode} {city}, {country}. You can reach me at "
            f"{email} or on {tel} during office hours.\n\nKind regards,\n{first} {last}")
    fields = [("name", f"{first} {last}"), ("company", company), ("order_date", when),
              ("order_number", order), ("product", product.lower()), ("price", f"{price:.2f} EUR"),
              ("problem", reason), ("street", street), ("postcode", postcode), ("city", city),
              ("country", country), ("email", email), ("phone", tel)]
    return "customer email", text, fields


def extract_ticket(rng):
    first, last, email = person(rng)
    service = rng.choice(SERVICES)
    region = rng.choice(REGIONS)
    ticket = f"INC-{rng.randint(1000, 9999)}"
    start = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} UTC"
    minutes = rng.randint(6, 95)
    error = rng.choice(["connection pool exhausted while waiting for a database connection",
                        "TLS handshake timeout when calling the payment provider",
                        "out of memory in the worker process during report generation",
                        "disk full on the node that stores the search index"])
    action = rng.choice(["restarted the affected pods and raised the pool size",
                         "rolled back to the previous release and opened a bug",
                         "moved the traffic to a healthy zone and replaced the node",
                         "cleared old files and added an alert on free disk space"])
    text = (f"Incident {ticket} was opened by {first} {last} ({email}) at {start} on "
            f"{date(rng)}. The {service} service in {region} returned errors for about {minutes} "
            f"minutes. The logs show \"{error}\". The on-call engineer {action}. Customers on "
            f"the {rng.choice(['Basic', 'Team', 'Enterprise'])} plan were affected; no data was lost.")
    fields = [("ticket", ticket), ("reported_by", f"{first} {last}"), ("email", email),
              ("start_time", start), ("service", service), ("region", region),
              ("duration", f"about {minutes} minutes"), ("error", error), ("action", action)]
    return "incident report", text, fields


def extract_listing(rng):
    first, last, email = person(rng)
    city, country, postcode = rng.choice(CITIES)
    street = f"{rng.randint(1, 180)} {rng.choice(STREETS)}"
    rooms = rng.randint(1, 5)
    area = rng.randint(38, 160)
    rent = rng.randint(6, 28) * 50
    floor = rng.randint(0, 7)
    avail = date(rng, 2025)
    extras = rng.choice(["a balcony facing the park and a storage room in the basement",
                         "a renovated kitchen, a washing machine and a bicycle shed",
                         "underfloor heating, a lift and a shared roof terrace",
                         "a small garden, a fireplace and parking for one car"])
    text = (f"Flat for rent in {city}: a bright {rooms}-bedroom flat of {area} square metres on "
            f"floor {floor} at {street}, {postcode} {city}. The rent is {rent} per month plus "
            f"utilities, with a deposit of two months. The flat has {extras}. It is available "
            f"from {avail}. Pets are {rng.choice(['welcome', 'not allowed'])}. To arrange a "
            f"viewing, write to {first} {last} at {email} or call {phone(rng)}.")
    fields = [("city", city), ("address", f"{street}, {postcode} {city}"), ("bedrooms", str(rooms)),
              ("area", f"{area} square metres"), ("floor", str(floor)),
              ("rent", f"{rent} per month plus utilities"), ("features", extras),
              ("available_from", avail), ("contact", f"{first} {last}"), ("email", email)]
    return "property listing", text, fields


def extract(rng, index):
    what, text, fields = [extract_email, extract_ticket, extract_listing][index % 3](rng)
    keys = ", ".join(k for k, _ in fields)
    answer = "\n".join(f"{k}: {v}" for k, v in fields)
    # The text first, the fields after it: SmolLM2-135M rewrote the text instead of answering
    # when the instruction came first.
    content = (f"Text ({what}):\n{text}\n\nList the following fields from the text, one per "
               f"line, as \"key: value\", copying each value exactly as it is written in the "
               f"text: {keys}.")
    return content, answer


# ---- stories -----------------------------------------------------------------------------

STORY_SUBJECTS = ["a dragon", "a lighthouse keeper", "a lost robot", "a young baker", "an old sailor",
                  "a fox in the city", "a girl who finds a map", "a clockmaker", "a brave mouse",
                  "a train driver", "a forgotten library", "a boy and his kite", "a river spirit",
                  "a night in the museum", "a village under snow", "two rival chefs"]
STORY_FORMS = ["Write a long story about {s}.", "Tell a story about {s}.",
               "Once upon a time there was {s}. Continue the story.",
               "Write a short story for children about {s}."]


def stories(rng, count):
    out = []
    for i in range(count):
        subject = STORY_SUBJECTS[i % len(STORY_SUBJECTS)]
        form = STORY_FORMS[(i // len(STORY_SUBJECTS) + i) % len(STORY_FORMS)]
        out.append({"id": f"story-{i:03d}", "kind": "story",
                    "messages": [{"role": "user", "content": form.format(s=subject)}],
                    "max_tokens": 128})
    rng.shuffle(out)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "bench", "data"))
    args = parser.parse_args()
    rng = random.Random(SEED)
    rows = []
    # 17 + 17 + 16 = 50, interleaved so that a trimmed run (-n) keeps all three kinds.
    makers = [("json_edit", json_edit, 17), ("typo_fix", typo_fix, 17), ("extract", extract, 16)]
    counts = {kind: 0 for kind, _, _ in makers}
    for i in range(sum(limit for _, _, limit in makers)):
        kind, make, _ = makers[i % 3]
        index = counts[kind]
        counts[kind] += 1
        content, answer = make(rng, index)
        rows.append({"id": f"{kind}-{index:02d}", "kind": kind,
                     "messages": [{"role": "user", "content": content}],
                     "max_tokens": max_tokens_for(answer)})
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "speculative_copy_prompts.jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    with open(os.path.join(args.out_dir, "speculative_story_prompts.jsonl"), "w") as f:
        for row in stories(rng, 64):
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
