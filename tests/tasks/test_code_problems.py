"""The built-in code problems: every one's asserts pass on a right answer and fail on a wrong one, so a pair's score
measures the answer, not a broken test."""
from __future__ import annotations

import collections

import pytest

from evalsuite.tasks.code_problems import builtin_problems

#: a right answer to each built-in problem (its body, after the problem's own signature)
RIGHT = {
    "add": "return a + b", "is_even": "return n % 2 == 0", "reverse_string": "return s[::-1]",
    "square": "return x * x", "sum_list": "return sum(nums)", "max_of_list": "return max(nums)",
    "celsius_to_fahrenheit": "return c * 9 / 5 + 32", "absolute_difference": "return abs(a - b)",
    "is_palindrome": "return s == s[::-1]", "count_vowels": "return sum(ch in 'aeiouAEIOU' for ch in s)",
    "factorial": "import math; return math.factorial(n)", "square_all": "return [x * x for x in nums]",
    "filter_positive": "return [x for x in nums if x > 0]", "count_evens": "return sum(x % 2 == 0 for x in nums)",
    "average": "return sum(nums) / len(nums)", "word_count": "return len(s.split())",
    "fibonacci": "a, b = 0, 1\n    for _ in range(n): a, b = b, a + b\n    return a",
    "is_prime": "return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))",
    "gcd": "import math; return math.gcd(a, b)", "sum_of_digits": "return sum(map(int, str(n)))",
    "remove_duplicates": "return list(dict.fromkeys(items))", "min_max": "return (min(nums), max(nums))",
    "longest_word": "return max(s.split(), key=len)",
    "char_frequency": "import collections; return dict(collections.Counter(s))",
    "is_sorted": "return all(x <= y for x, y in zip(nums, nums[1:]))",
    "flatten": "return [x for inner in lists for x in inner]",
    "capitalize_words": "return ' '.join(w[:1].upper() + w[1:] for w in s.split(' '))",
    "fizzbuzz": "return 'FizzBuzz' if n % 15 == 0 else 'Fizz' if n % 3 == 0 else 'Buzz' if n % 5 == 0 else str(n)",
    "subtract": "return a - b", "multiply": "return a * b", "is_odd": "return n % 2 == 1", "cube": "return x ** 3",
    "last_element": "return items[-1]", "min_of_list": "return min(nums)", "string_length": "return len(s)",
    "to_upper": "return s.upper()", "count_char": "return s.count(c)", "double_all": "return [2 * x for x in nums]",
    "product_list": "import math; return math.prod(nums)", "is_negative": "return n < 0",
    "max_of_two": "return max(a, b)", "contains": "return x in items", "repeat_string": "return s * n",
    "first_char": "return s[0]", "is_empty": "return len(items) == 0", "rectangle_area": "return width * height",
    "minutes_to_seconds": "return minutes * 60", "join_words": "return ' '.join(words)",
    "count_positive": "return sum(x > 0 for x in nums)", "sum_to_n": "return n * (n + 1) // 2",
    "is_divisible": "return a % b == 0", "to_lower": "return s.lower()",
    "second_largest": "return sorted(set(nums))[-2]",
    "running_sum": "import itertools; return list(itertools.accumulate(nums))",
    "reverse_words": "return ' '.join(reversed(s.split(' ')))", "is_anagram": "return sorted(a) == sorted(b)",
    "digits_list": "return [int(d) for d in str(n)]", "is_power_of_two": "return n > 0 and n & (n - 1) == 0",
    "lcm": "import math; return a * b // math.gcd(a, b)", "merge_sorted": "return sorted(a + b)",
    "count_upper": "return sum(ch.isupper() for ch in s)",
    "index_of": "return items.index(x) if x in items else -1",
    "rotate_left": "k = k % len(items) if items else 0\n    return items[k:] + items[:k]",
    "unique_count": "return len(set(items))", "pairwise_sum": "return [x + y for x, y in zip(a, b)]",
    "remove_vowels": "return ''.join(ch for ch in s if ch not in 'aeiouAEIOU')",
    "binary_string": "return bin(n)[2:]", "sum_of_squares": "return sum(i * i for i in range(n + 1))",
    "count_digits": "return len(str(n))",
    "chunk_list": "return [items[i:i + size] for i in range(0, len(items), size)]",
    "most_common": "return max(items, key=items.count)", "swap_case": "return s.swapcase()",
    "is_leap_year": "return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)",
    "index_of_max": "return nums.index(max(nums))", "count_substring": "return s.count(sub)",
    "even_positions": "return items[::2]", "list_difference": "return [x for x in a if x not in b]",
    "common_elements": "return list(dict.fromkeys(x for x in a if x in b))",
    "sum_even": "return sum(x for x in nums if x % 2 == 0)", "max_difference": "return max(nums) - min(nums)",
}


def passes(problem, body: str) -> bool:
    """Whether ``body`` under the problem's own signature passes its asserts."""
    scope: dict = {}
    exec(problem.prompt + "    " + body + "\n", scope)  # noqa: S102 (our own reference answers)
    try:
        exec(problem.test, scope)  # noqa: S102
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("problem", builtin_problems(), ids=lambda p: p.entry_point)
def test_a_right_answer_passes_and_a_wrong_one_fails(problem):
    assert passes(problem, RIGHT[problem.entry_point])
    assert not passes(problem, "return None")


def test_every_problem_has_a_right_answer_and_the_levels_are_even():
    problems = builtin_problems()
    assert sorted(RIGHT) == sorted(p.entry_point for p in problems)
    assert collections.Counter(p.difficulty for p in problems) == {"easy": 40, "medium": 40}
