"""A small benchmark the project writes itself, so decontamination can be tested end to end without
third-party evaluation data: GSM8K-like math word problems, MMLU-like multiple-choice questions and
CMath-like Chinese word problems. All text here is original; numbers and names are drawn from a seeded
RNG, so the same arguments always give the same items.

One JSONL record per item, with the benchmark's own field names:
  gsm8k_synth  {"benchmark", "item_id", "question", "answer"}   (answer: steps with <<a*b=c>>
               calculator annotations and a final "#### N" line, as GSM8K has)
  mmlu_synth   {"benchmark", "item_id", "subject", "question", "choices": [4], "answer": "A".."D"}
  cmath_synth  {"benchmark", "item_id", "question", "answer"}   (Chinese)

``benchmark_records(gsm8k=10_000)`` scales the templated benchmarks for index benchmarks (the 30
GSM8K templates refilled with other names and numbers); the MMLU-like questions are a fixed set.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Callable

SHE = ("Maya", "Priya", "Aisha", "Mei", "Ingrid", "Nadia", "Lena", "Sofia", "Yuki", "Amara", "Hana")
HE = ("Leo", "Tomas", "Jonah", "Carlos", "Kofi", "Oscar", "Ravi", "Daniel", "Felix")
NAMES = SHE + HE
ZH_NAMES = ("小明", "小红", "小刚", "小丽", "小华", "小军", "小芳", "小强", "小雨", "小东")


class _Draw:
    """Names and numbers for one item; `calc` writes a GSM8K step annotation and returns the value."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def name(self, *avoid: str) -> str:
        return self.rng.choice([n for n in NAMES if n not in avoid])

    def she(self) -> str:
        return self.rng.choice(SHE)

    def he(self) -> str:
        return self.rng.choice(HE)

    def zh_name(self, *avoid: str) -> str:
        return self.rng.choice([n for n in ZH_NAMES if n not in avoid])

    def n(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def pick(self, *options):
        return self.rng.choice(options)


def _calc(expr: str) -> tuple[str, int]:
    """('<<expr=v>>v', v) for an integer expression of + - * / (GSM8K's annotation)."""
    value = eval(expr, {"__builtins__": {}})  # our own fixed templates: arithmetic only
    assert value == int(value), expr
    value = int(value)
    return f"<<{expr}={value}>>{value}", value


def _answer(steps: list[str], result: int) -> str:
    return "\n".join(steps + [f"#### {result}"])


# ---------------------------------------------------------------------------- GSM8K-like
def _g_change(d):
    a, n, p, b = d.she(), d.n(2, 6), d.n(2, 5), d.n(15, 40)
    q = (f"{a} buys {n} notebooks at ${p} each and a backpack that costs ${b}. She pays with a $100 bill. "
         "How much change does she get back?")
    s1, c = _calc(f"{n}*{p}")
    s2, t = _calc(f"{c}+{b}")
    s3, r = _calc(f"100-{t}")
    return q, [f"The notebooks cost {s1} dollars.", f"Together with the backpack she spends {s2} dollars.",
               f"Her change is {s3} dollars."], r


def _g_orchard(d):
    a, b, c = d.n(4, 12), d.n(6, 15), d.n(2, 5)
    q = (f"A farmer has {a} rows of apple trees with {b} trees in each row. Each tree gives {c} baskets of "
         "apples this autumn. How many baskets of apples does the farmer collect in total?")
    s1, t = _calc(f"{a}*{b}")
    s2, r = _calc(f"{t}*{c}")
    return q, [f"There are {s1} trees.", f"They give {s2} baskets."], r


def _g_pages(d):
    a, x, y, w = d.name(), d.n(10, 30), d.n(20, 60), d.n(2, 4)
    q = (f"{a} reads {x} pages of a novel every weekday and {y} pages on each day of the weekend. "
         f"How many pages does {a} read in {w} weeks?")
    s1, wd = _calc(f"5*{x}")
    s2, we = _calc(f"2*{y}")
    s3, pw = _calc(f"{wd}+{we}")
    s4, r = _calc(f"{pw}*{w}")
    return q, [f"On weekdays {a} reads {s1} pages.", f"On the weekend {a} reads {s2} pages.",
               f"That is {s3} pages a week.", f"In {w} weeks it is {s4} pages."], r


def _g_bus(d):
    b, c = d.n(3, 9), d.n(2, 8)
    a = 2 * d.n(10, 25) + b - c
    q = (f"A bus leaves the depot with {a} passengers. At the first stop {b} people get off and {c} get on. "
         "At the second stop half of the passengers get off. How many passengers are left on the bus?")
    s1, t = _calc(f"{a}-{b}+{c}")
    s2, r = _calc(f"{t}/2")
    return q, [f"After the first stop there are {s1} passengers.", f"Half of them stay: {s2}."], r


def _g_saving(d):
    a, w, c, b = d.she(), d.n(4, 12), d.n(8, 20), d.n(20, 90)
    price = b + w * c
    q = (f"{a} is saving for a bicycle that costs ${price}. She already has ${b} and earns ${c} each week "
         "walking dogs. How many weeks will it take her to save enough money?")
    s1, need = _calc(f"{price}-{b}")
    s2, r = _calc(f"{need}/{c}")
    return q, [f"She still needs {s1} dollars.", f"At {c} dollars a week that takes {s2} weeks."], r


def _g_pencils(d):
    c, k, b = d.n(3, 8), d.n(2, 5), d.n(10, 24)
    a = c * k
    q = (f"A school orders {a} boxes of pencils. Each box holds {b} pencils. The pencils are shared equally "
         f"among {c} classrooms. How many pencils does each classroom get?")
    s1, t = _calc(f"{a}*{b}")
    s2, r = _calc(f"{t}/{c}")
    return q, [f"There are {s1} pencils.", f"Each classroom gets {s2} pencils."], r


def _g_running(d):
    a, x = d.she(), d.n(3, 9)
    y = d.n(1, 2 * x - 1)
    q = (f"{a} runs {x} kilometers on Monday, twice as far on Tuesday, and {y} kilometers less than Tuesday "
         "on Wednesday. How many kilometers does she run over the three days?")
    s1, tu = _calc(f"2*{x}")
    s2, we = _calc(f"{tu}-{y}")
    s3, r = _calc(f"{x}+{tu}+{we}")
    return q, [f"On Tuesday she runs {s1} kilometers.", f"On Wednesday she runs {s2} kilometers.",
               f"In total she runs {s3} kilometers."], r


def _g_fence(d):
    a, x, y, c = d.name(), d.n(8, 30), d.n(4, 15), d.n(3, 12)
    q = (f"A rectangular garden is {x} meters long and {y} meters wide. {a} wants to put a fence around the "
         f"whole garden. Fencing costs ${c} per meter. How much will the fence cost?")
    s1, per = _calc(f"2*({x}+{y})")
    s2, r = _calc(f"{per}*{c}")
    return q, [f"The perimeter is {s1} meters.", f"The fence costs {s2} dollars."], r


def _g_walkers(d):
    n, p = 20 * d.n(1, 3), d.pick(20, 25, 40, 60, 75, 80)  # 20k students: p% of them is whole
    q = (f"There are {n} students in a class. {p} percent of them walk to school, and the rest take the bus. "
         "How many students take the bus?")
    s1, w = _calc(f"{n}*{p}/100")
    s2, r = _calc(f"{n}-{w}")
    return q, [f"{s1} students walk.", f"{s2} students take the bus."], r


def _g_marbles(d):
    a, x, b, c, k = d.he(), d.n(30, 80), d.n(5, 20), d.n(2, 5), d.n(6, 12)
    q = (f"{a} has {x} marbles. He gives {b} marbles to his sister and then buys {c} packs with {k} marbles "
         "in each pack. How many marbles does he have now?")
    s1, left = _calc(f"{x}-{b}")
    s2, new = _calc(f"{c}*{k}")
    s3, r = _calc(f"{left}+{new}")
    return q, [f"After giving some away he has {s1} marbles.", f"He buys {s2} marbles.",
               f"Now he has {s3} marbles."], r


def _g_tickets(d):
    a, b, c, k = d.n(9, 15), d.n(4, 8), d.n(40, 120), d.n(20, 90)
    q = (f"A movie theater sells adult tickets for ${a} and child tickets for ${b}. On Saturday it sells {c} "
         f"adult tickets and {k} child tickets. How much money does the theater make on Saturday?")
    s1, x = _calc(f"{a}*{c}")
    s2, y = _calc(f"{b}*{k}")
    s3, r = _calc(f"{x}+{y}")
    return q, [f"Adult tickets bring in {s1} dollars.", f"Child tickets bring in {s2} dollars.",
               f"The theater makes {s3} dollars."], r


def _g_bucket(d):
    a, b, k = d.she(), d.n(3, 9), d.n(6, 20)
    q = (f"{a} fills a {b * k}-liter fish tank using a bucket that holds {b} liters. How many times does she "
         "need to fill the bucket?")
    s1, r = _calc(f"{b * k}/{b}")
    return q, [f"She fills the bucket {s1} times."], r


def _g_bread(d):
    b, k = d.n(10, 30), d.n(5, 15)
    a = b + 4 * k
    q = (f"A bakery makes {a} loaves of bread each morning. It sells {b} loaves before noon and three "
         "quarters of the remaining loaves in the afternoon. How many loaves are left at closing time?")
    s1, rest = _calc(f"{a}-{b}")
    s2, sold = _calc(f"{rest}*3/4")
    s3, r = _calc(f"{rest}-{sold}")
    return q, [f"After the morning {s1} loaves remain.", f"In the afternoon it sells {s2} loaves.",
               f"{s3} loaves are left."], r


def _g_wages(d):
    a, x, b, c = d.she(), 2 * d.n(6, 11), d.n(10, 25), d.n(3, 8)
    q = (f"{a} earns ${x} per hour at the library. Last week she worked {b} hours on weekdays and {c} hours "
         "on Saturday, when she is paid one and a half times her usual rate. How much did she earn last week?")
    s1, wk = _calc(f"{x}*{b}")
    s2, rate = _calc(f"{x}*3/2")
    s3, sat = _calc(f"{rate}*{c}")
    s4, r = _calc(f"{wk}+{sat}")
    return q, [f"On weekdays she earns {s1} dollars.", f"On Saturday her rate is {s2} dollars an hour.",
               f"So on Saturday she earns {s3} dollars.", f"In total she earns {s4} dollars."], r


def _g_train(d):
    a, b, c, k = 10 * d.n(6, 12), d.n(2, 5), 10 * d.n(4, 9), d.n(1, 3)
    q = (f"A train travels at {a} kilometers per hour for {b} hours and then at {c} kilometers per hour for "
         f"another {k} hours. What is the total distance the train travels?")
    s1, x = _calc(f"{a}*{b}")
    s2, y = _calc(f"{c}*{k}")
    s3, r = _calc(f"{x}+{y}")
    return q, [f"The first part is {s1} kilometers.", f"The second part is {s2} kilometers.",
               f"The total is {s3} kilometers."], r


def _g_seeds(d):
    a, c = d.name(), d.pick(4, 5, 10)
    b, k = d.n(1, c - 1), d.n(4, 12)
    n = c * k
    eaten = d.n(1, b * k - 1)
    q = (f"{a} plants {n} sunflower seeds. Only {b} out of every {c} seeds sprout, and rabbits eat {eaten} "
         "of the young plants. How many sunflowers are still growing?")
    s1, sp = _calc(f"{n}*{b}/{c}")
    s2, r = _calc(f"{sp}-{eaten}")
    return q, [f"{s1} seeds sprout.", f"{s2} sunflowers are still growing."], r


def _g_library(d):
    a, b, c = d.n(200, 600), d.n(50, 150), d.n(20, 60)
    q = (f"A library has {a} books on the first floor and {b} more books on the second floor than on the "
         f"first. If {c} books are checked out from each floor, how many books remain in the library?")
    s1, sec = _calc(f"{a}+{b}")
    s2, tot = _calc(f"{a}+{sec}")
    s3, r = _calc(f"{tot}-2*{c}")
    return q, [f"The second floor has {s1} books.", f"Together there are {s2} books.",
               f"After the loans {s3} books remain."], r


def _g_stickers(d):
    a = d.name()
    b = d.name(a)
    x, k = 2 * d.n(3, 10), d.n(10, 30)
    total = 2 * k + x
    q = (f"{a} and {b} share {total} stickers so that {b} gets {x} more stickers than {a}. "
         f"How many stickers does {a} get?")
    s1, rest = _calc(f"{total}-{x}")
    s2, r = _calc(f"{rest}/2")
    return q, [f"Without the extra stickers there are {s1}.", f"{a} gets {s2} stickers."], r


def _g_coffee(d):
    g, kg, bags = d.pick(8, 10, 20, 25, 40, 50), d.n(2, 5), d.n(2, 6)
    q = (f"A cafe uses {g} grams of coffee beans for each cup of coffee. A bag holds {kg} kilograms of "
         f"beans. How many cups of coffee can the cafe make from {bags} bags?")
    s1, grams = _calc(f"{kg}*1000*{bags}")
    s2, r = _calc(f"{grams}/{g}")
    return q, [f"The bags hold {s1} grams.", f"That makes {s2} cups."], r


def _g_discount(d):
    a, price, p = d.name(), 20 * d.n(2, 9), d.pick(10, 15, 20, 25, 30, 50)
    q = (f"{a} buys a jacket that normally costs ${price}. The store is having a sale with {p} percent off. "
         f"How much does {a} pay for the jacket?")
    s1, off = _calc(f"{price}*{p}/100")
    s2, r = _calc(f"{price}-{off}")
    return q, [f"The discount is {s1} dollars.", f"{a} pays {s2} dollars."], r


def _g_pool(d):
    c, net, k = d.n(1, 5), d.n(5, 20), d.n(20, 60)
    b, cap = c + net, net * k
    q = (f"A swimming pool holds {cap} liters of water. A hose adds {b} liters per minute, but a leak loses "
         f"{c} liters per minute. How many minutes does it take to fill the empty pool?")
    s1, n = _calc(f"{b}-{c}")
    s2, r = _calc(f"{cap}/{n}")
    return q, [f"The pool gains {s1} liters a minute.", f"It fills in {s2} minutes."], r


def _g_shells(d):
    a, x, b = d.she(), d.n(5, 20), d.n(2, 4)
    c = d.n(1, b * x - 1)
    q = (f"{a} collects {x} shells on Monday. On Tuesday she collects {b} times as many as on Monday, and on "
         f"Wednesday she collects {c} fewer than on Tuesday. How many shells does she collect in the three days?")
    s1, tu = _calc(f"{x}*{b}")
    s2, we = _calc(f"{tu}-{c}")
    s3, r = _calc(f"{x}+{tu}+{we}")
    return q, [f"On Tuesday she collects {s1} shells.", f"On Wednesday she collects {s2} shells.",
               f"In total she collects {s3} shells."], r


def _g_pizza(d):
    a = d.name()
    b = d.name(a)
    x = d.n(1, 3)
    slices = d.pick(10, 12, 16)
    q = (f"A pizza is cut into {slices} slices. {a} eats {x} slices, {b} eats twice as many as {a}, and the "
         "rest are saved for later. How many slices are saved?")
    s1, y = _calc(f"2*{x}")
    s2, r = _calc(f"{slices}-{x}-{y}")
    return q, [f"{b} eats {s1} slices.", f"{s2} slices are saved."], r


def _g_robots(d):
    a, b, c = d.n(20, 60), d.n(6, 12), d.n(4, 6)
    q = (f"A toy factory makes {a} robots every hour. The factory runs for {b} hours each day, {c} days a "
         "week. How many robots does it make in one week?")
    s1, day = _calc(f"{a}*{b}")
    s2, r = _calc(f"{day}*{c}")
    return q, [f"Each day it makes {s1} robots.", f"In a week it makes {s2} robots."], r


def _g_tiles(d):
    a, c, k = d.she(), d.pick(2, 3, 4), d.n(3, 9)
    x = c * k
    y = d.n(2, 6)
    q = (f"{a} wants to tile a floor that is {x} meters by {y} meters. Each box of tiles covers {c} square "
         "meters. How many boxes does she need?")
    s1, area = _calc(f"{x}*{y}")
    s2, r = _calc(f"{area}/{c}")
    return q, [f"The floor is {s1} square meters.", f"She needs {s2} boxes."], r


def _g_penguins(d):
    j, q_, b, days = d.n(2, 4), d.n(4, 10), d.n(3, 6), d.n(2, 7)
    a, crate = j * q_, b * j
    q = (f"A zoo has {a} penguins. Each penguin eats {b} fish a day. The zoo buys fish in crates of {crate}. "
         f"How many crates does the zoo need for {days} days?")
    s1, per_day = _calc(f"{a}*{b}")
    s2, tot = _calc(f"{per_day}*{days}")
    s3, r = _calc(f"{tot}/{crate}")
    return q, [f"The penguins eat {s1} fish a day.", f"In {days} days they eat {s2} fish.",
               f"That is {s3} crates."], r


def _g_fuel(d):
    a, km, b = d.she(), 50 * d.n(1, 6), d.n(5, 9)
    q = (f"{a} drives {km} kilometers to visit her grandmother. Her car uses {b} liters of fuel for every 100 "
         "kilometers. How many liters of fuel does she use for the round trip?")
    s1, trip = _calc(f"2*{km}")
    s2, r = _calc(f"{trip}*{b}/100")
    return q, [f"The round trip is {s1} kilometers.", f"She uses {s2} liters of fuel."], r


def _g_cans(d):
    a, b, c = d.n(10, 40), d.n(2, 8), d.n(3, 5)
    q = (f"A class collects {a} cans for a food drive in the first week and {b} more cans each week than the "
         f"week before. How many cans does the class collect in {c} weeks?")
    weeks = [a + b * i for i in range(c)]
    s1, r = _calc("+".join(map(str, weeks)))
    return q, [f"The weekly totals are {', '.join(map(str, weeks))}.", f"Together that is {s1} cans."], r


def _g_cards(d):
    a, n, b = d.she(), d.n(3, 8), d.n(8, 15)
    c = d.n(1, b - 2)
    q = (f"{a} buys {n} packs of trading cards. Each pack has {b} cards, and {c} of the cards in every pack "
         "are doubles she already owns. How many new cards does she get?")
    s1, new = _calc(f"{b}-{c}")
    s2, r = _calc(f"{n}*{new}")
    return q, [f"Each pack has {s1} new cards.", f"She gets {s2} new cards."], r


def _g_fertilizer(d):
    c, k, b = d.pick(250, 500, 1000), d.n(2, 8), d.pick(5, 10, 25, 50)  # b divides c
    liters = c // b * k
    q = (f"A gardener mixes {liters} liters of water with fertilizer at a ratio of {b} milliliters of "
         f"fertilizer per liter. A bottle of fertilizer holds {c} milliliters. How many bottles does the "
         "gardener need?")
    s1, ml = _calc(f"{liters}*{b}")
    s2, r = _calc(f"{ml}/{c}")
    return q, [f"The gardener needs {s1} milliliters.", f"That is {s2} bottles."], r


GSM8K_TEMPLATES: tuple[Callable, ...] = (
    _g_change, _g_orchard, _g_pages, _g_bus, _g_saving, _g_pencils, _g_running, _g_fence, _g_walkers,
    _g_marbles, _g_tickets, _g_bucket, _g_bread, _g_wages, _g_train, _g_seeds, _g_library, _g_stickers,
    _g_coffee, _g_discount, _g_pool, _g_shells, _g_pizza, _g_robots, _g_tiles, _g_penguins, _g_fuel,
    _g_cans, _g_cards, _g_fertilizer)


# ---------------------------------------------------------------------------- MMLU-like (fixed)
# (subject, question, choices, index of the right choice). Several questions are shorter than 13
# words on purpose: the index uses shorter n-grams for them.
MMLU_ITEMS: tuple[tuple[str, str, tuple[str, str, str, str], int], ...] = (
    ("biology", "Which organelle of a plant cell captures light energy and uses it to build sugar molecules?",
     ("The mitochondrion", "The chloroplast", "The ribosome", "The vacuole"), 1),
    ("biology", "A population of beetles lives on dark tree bark for many generations. Which change is most "
     "likely to become common if birds hunt the beetles by sight?",
     ("Lighter shells", "Darker shells", "Longer antennae", "Fewer legs"), 1),
    ("chemistry", "Which of the following describes what happens to the particles of a gas when it is "
     "cooled at constant pressure?",
     ("They move faster and spread apart", "They move more slowly and the volume shrinks",
      "They split into smaller atoms", "They gain electric charge"), 1),
    ("chemistry", "Which solution has the lowest pH?",
     ("Lemon juice", "Pure water", "Baking soda solution", "Household ammonia"), 0),
    ("physics", "A cart rolls across a level floor and slowly comes to a stop. Which force is mainly "
     "responsible for stopping the cart?", ("Gravity", "Friction", "Magnetism", "Buoyancy"), 1),
    ("physics", "Which unit is used to measure electrical resistance?",
     ("Volt", "Ampere", "Ohm", "Watt"), 2),
    ("astronomy", "Why does the Moon show different phases to an observer on Earth over the course of a "
     "month?", ("The shadow of the Earth covers different parts of it",
                "We see different portions of its sunlit half as it orbits the Earth",
                "Clouds on the Moon move across its surface", "The Moon changes its distance from the Sun"), 1),
    ("astronomy", "Which planet in our solar system has the shortest year?",
     ("Venus", "Mercury", "Mars", "Neptune"), 1),
    ("geography", "A river carries sand and mud to the sea, where they settle and build new land at its "
     "mouth. What is this landform called?", ("A delta", "A canyon", "A glacier", "A plateau"), 0),
    ("geography", "Which line of latitude divides the Earth into the Northern and Southern Hemispheres?",
     ("The Prime Meridian", "The Tropic of Cancer", "The Equator", "The Arctic Circle"), 2),
    ("economics", "When the price of a good rises and everything else stays the same, what usually happens "
     "to the quantity of that good that consumers want to buy?",
     ("It rises", "It falls", "It stays exactly the same", "It becomes zero"), 1),
    ("economics", "A government prints a large amount of new money without any growth in production. "
     "Which outcome is most likely?", ("Deflation", "Inflation", "A trade surplus", "Lower interest on savings"), 1),
    ("computer_science", "What is the worst case number of comparisons made by binary search on a sorted "
     "list of n elements, in big O notation?", ("O(1)", "O(log n)", "O(n)", "O(n log n)"), 1),
    ("computer_science", "Which data structure returns items in the reverse order of their insertion?",
     ("A queue", "A stack", "A heap", "A hash table"), 1),
    ("computer_science", "In a relational database, what is the purpose of a primary key in a table?",
     ("To sort the rows alphabetically", "To uniquely identify each row", "To encrypt the stored data",
      "To link the table to a spreadsheet"), 1),
    ("mathematics", "What is the sum of the interior angles of a convex hexagon?",
     ("360 degrees", "540 degrees", "720 degrees", "900 degrees"), 2),
    ("mathematics", "If a fair coin is tossed three times, what is the probability of getting exactly two "
     "heads?", ("1/8", "1/4", "3/8", "1/2"), 2),
    ("mathematics", "Which number is both a perfect square and a perfect cube?",
     ("16", "27", "64", "100"), 2),
    ("statistics", "A teacher adds five points to every student's test score. How does this change the "
     "standard deviation of the scores?", ("It increases by five", "It decreases by five", "It does not change",
                                          "It doubles"), 2),
    ("nutrition", "Which nutrient is the body's main source of quick energy during intense exercise?",
     ("Carbohydrates", "Vitamin C", "Calcium", "Fiber"), 0),
    ("nutrition", "Which vitamin does the human skin produce when it is exposed to sunlight?",
     ("Vitamin A", "Vitamin B12", "Vitamin D", "Vitamin K"), 2),
    ("history", "Which invention of the fifteenth century made books much cheaper and helped ideas spread "
     "quickly across Europe?", ("The telescope", "The movable type printing press", "The steam engine",
                                "The mechanical clock"), 1),
    ("history", "The ancient city of Rome was first governed as a kingdom. What form of government replaced "
     "the kingdom?", ("A republic", "A theocracy", "An empire ruled by Egypt", "A federation of tribes"), 0),
    ("philosophy", "Which branch of philosophy studies questions about what is right and wrong in human "
     "conduct?", ("Logic", "Ethics", "Aesthetics", "Epistemology"), 1),
    ("law", "In many legal systems, what does the principle that a person is presumed innocent until proven "
     "guilty require?", ("The accused must prove innocence", "The prosecution must prove guilt",
                         "The judge must decide before the trial", "Witnesses must remain anonymous"), 1),
    ("psychology", "A dog learns to salivate when it hears a bell that has often rung just before feeding. "
     "What kind of learning is this?", ("Operant conditioning", "Classical conditioning",
                                        "Observational learning", "Insight learning"), 1),
    ("sociology", "Which term describes the process by which people learn the norms and values of their "
     "society?", ("Socialization", "Urbanization", "Stratification", "Globalization"), 0),
    ("medicine", "Which blood cells are mainly responsible for carrying oxygen?",
     ("White blood cells", "Platelets", "Red blood cells", "Plasma cells"), 2),
    ("engineering", "Why are long steel bridges often built with small gaps called expansion joints?",
     ("To let rain drain away", "To allow the steel to expand and contract with temperature",
      "To reduce the weight of the bridge", "To make painting easier"), 1),
    ("environmental_science", "Which gas released by burning coal, oil and natural gas is the largest "
     "contributor to the enhanced greenhouse effect?", ("Oxygen", "Nitrogen", "Carbon dioxide", "Helium"), 2),
)


# ---------------------------------------------------------------------------- CMath-like (Chinese)
def _c_stationery(d):
    a, n, p, b = d.zh_name(), d.n(3, 9), d.n(2, 6), d.n(8, 25)
    q = f"{a}买了{n}支铅笔，每支{p}元，又买了一个{b}元的文具盒。{a}一共花了多少元？"
    return q, f"{n}×{p}+{b}={n * p + b}（元）\n答：{a}一共花了{n * p + b}元。", n * p + b


def _c_orchard(d):
    a, b, c = d.n(5, 12), d.n(8, 20), d.n(2, 6)
    q = f"一个果园有{a}行苹果树，每行{b}棵，每棵树今年结了{c}筐苹果。这个果园今年一共收了多少筐苹果？"
    return q, f"{a}×{b}×{c}={a * b * c}（筐）\n答：一共收了{a * b * c}筐苹果。", a * b * c


def _c_book(d):
    a, x, days, left = d.zh_name(), d.n(10, 25), d.n(4, 9), d.n(20, 80)
    total = x * days + left
    q = f"{a}每天看{x}页书，看了{days}天后，还剩{left}页没有看。这本书一共有多少页？"
    return q, f"{x}×{days}+{left}={total}（页）\n答：这本书一共有{total}页。", total


def _c_milk(d):
    c, k, b = d.n(4, 9), d.n(3, 8), d.pick(12, 20, 24)
    a = c * k
    q = f"学校买来{a}箱牛奶，每箱有{b}盒，把这些牛奶平均分给{c}个班。每个班能分到多少盒牛奶？"
    return q, f"{a}×{b}÷{c}={a * b // c}（盒）\n答：每个班分到{a * b // c}盒牛奶。", a * b // c


def _c_trip(d):
    v, m, k = 10 * d.n(4, 9), d.pick(2, 3), d.n(2, 4)
    t = m * k
    q = f"一辆汽车从甲地开往乙地，每小时行驶{v}千米，用了{t}小时。返回时的速度是去时的{m}倍，返回用了多少小时？"
    return q, f"{v}×{t}÷({v}×{m})={k}（小时）\n答：返回用了{k}小时。", k


def _c_fruit(d):
    a, b = d.n(8, 20), d.n(2, 6)
    q = f"妈妈去市场买水果，买了{a}千克苹果，苹果比梨多买了{b}千克。妈妈买的苹果和梨一共有多少千克？"
    return q, f"{a}+({a}-{b})={2 * a - b}（千克）\n答：一共有{2 * a - b}千克。", 2 * a - b


def _c_fence(d):
    x, y, c = d.n(6, 20), d.n(3, 10), d.n(5, 15)
    r = 2 * (x + y) * c
    q = f"一个长方形花坛长{x}米，宽{y}米。在花坛的四周围上一圈栏杆，栏杆每米{c}元，一共需要多少元？"
    return q, f"({x}+{y})×2×{c}={r}（元）\n答：一共需要{r}元。", r


def _c_stamps(d):
    a = d.zh_name()
    b = d.zh_name(a)
    x, k = d.n(20, 60), d.n(2, 4)
    r = x * (k + 1)
    q = f"{a}有{x}张邮票，{b}的邮票张数是{a}的{k}倍。{a}和{b}两人一共有多少张邮票？"
    return q, f"{x}+{x}×{k}={r}（张）\n答：两人一共有{r}张邮票。", r


def _c_parts(d):
    c, j, days = d.pick(20, 25, 50), d.n(3, 12), d.n(2, 6)
    a, r = c * j, j * days
    q = f"一个工厂每天生产{a}个零件，把{days}天生产的零件装箱，每箱装{c}个，一共可以装多少箱？"
    return q, f"{a}×{days}÷{c}={r}（箱）\n答：一共可以装{r}箱。", r


def _c_books(d):
    a, b, c, k = d.n(12, 30), d.n(3, 10), d.n(2, 6), d.n(2, 6)
    r = a * c + (a + b) * k
    q = f"一本故事书{a}元，一本科技书比故事书贵{b}元。王老师买了{c}本故事书和{k}本科技书，一共花了多少元？"
    return q, f"{a}×{c}+({a}+{b})×{k}={r}（元）\n答：一共花了{r}元。", r


CMATH_TEMPLATES: tuple[Callable, ...] = (_c_stationery, _c_orchard, _c_book, _c_milk, _c_trip, _c_fruit,
                                         _c_fence, _c_stamps, _c_parts, _c_books)


# ---------------------------------------------------------------------------- records and file
def benchmark_records(seed: int = 0, gsm8k: int = 30, mmlu: int = 30, cmath: int = 10) -> list[dict]:
    """The items, in a fixed order: gsm8k_synth, then mmlu_synth (at most 30), then cmath_synth.
    Item i of a templated benchmark uses template i mod the number of templates."""
    rng = random.Random(f"benchmark/{seed}")
    d = _Draw(rng)
    out = []
    for i in range(gsm8k):
        q, steps, result = GSM8K_TEMPLATES[i % len(GSM8K_TEMPLATES)](d)
        out.append({"benchmark": "gsm8k_synth", "item_id": f"gsm8k_synth/{i}", "question": q,
                    "answer": _answer(steps, result)})
    for i, (subject, q, choices, right) in enumerate(MMLU_ITEMS[:mmlu]):
        out.append({"benchmark": "mmlu_synth", "item_id": f"mmlu_synth/{i}", "subject": subject,
                    "question": q, "choices": list(choices), "answer": "ABCD"[right]})
    for i in range(cmath):
        q, answer, _ = CMATH_TEMPLATES[i % len(CMATH_TEMPLATES)](d)
        out.append({"benchmark": "cmath_synth", "item_id": f"cmath_synth/{i}", "question": q,
                    "answer": answer})
    return out


def write_benchmark(path: str | os.PathLike, records: list[dict] | None = None) -> str:
    """Write the records (default: ``benchmark_records()``) as JSONL; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for rec in records if records is not None else benchmark_records():
            fh.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")
    return str(path)
