"""The course in a real browser: the home page lists chapters; a chapter's figures follow its inputs."""

import re

from playwright.sync_api import expect

import chapters


def test_home_lists_chapters_and_opens_one(page, stack, shot):
    page.goto(stack.url + "/")
    expect(page.locator(".toc-item")).to_have_count(9)
    shot("home")
    page.get_by_role("link", name=re.compile("Task Queue Anatomy")).first.click()
    expect(page.locator("h1")).to_contain_text("Task Queue Anatomy")
    expect(page.locator(".prose")).to_be_visible()
    shot("chapter-1")


def test_changing_an_input_on_a_chapter_page_recomputes_its_figures(page, stack, shot):
    page.goto(stack.url + "/chapters/2")
    default = chapters.derive()["ch2"]["workers_at_target"]
    headline = page.locator(".prose strong", has_text=re.compile(r"^[\d,]+ workers$")).first
    expect(headline).to_have_text(f"{default:,} workers")
    field = page.locator("input[name=arrival_rate]")
    field.fill("200")
    field.dispatch_event("input")
    expect(headline).to_have_text(f"{2 * default:,} workers")
    expect(page).to_have_url(re.compile(r"arrival_rate=200"))  # the what-if is a shareable link
    shot("chapter-2-doubled")


def test_chapters_you_opened_are_marked_read_on_the_home_page(page, stack):
    page.goto(stack.url + "/chapters/3")
    page.goto(stack.url + "/")
    expect(page.locator('.toc-item[data-chapter="3"]')).to_have_class(re.compile("visited"))
    expect(page.locator('.toc-item[data-chapter="4"]')).not_to_have_class(re.compile("visited"))
