"""The names optional packages ship, for machines without them: an agent without ale-py
or miniwob still drives remotes that have them (``gymnasium.make(
"universe-remote/atari.Pong-v0", remotes=ADDR)``), so the catalogue lists their ids from
here when the package is absent, and from the package itself when it is installed.

Holds :data:`ATARI_ROMS` (the ROMs ale-py 0.12 ships, ``ale_py/roms/*.bin``) and
:data:`MINIWOB_PAGES` (the task pages miniwob 1.1 ships, ``html/miniwob/*.html``).
``tests/runtimes/test_registry.py`` keeps them equal to the installed packages'.
"""

from __future__ import annotations

from typing import Final

#: ale-py's ROMs, by file stem (``runtimes.registry`` leaves out the two-player ones).
ATARI_ROMS: Final = (
    "adventure", "air_raid", "alien", "amidar", "assault", "asterix", "asteroids",
    "atlantis", "atlantis2", "backgammon", "bank_heist", "basic_math", "battle_zone",
    "beam_rider", "berzerk", "blackjack", "bowling", "boxing", "breakout", "carnival",
    "casino", "centipede", "chopper_command", "combat", "crazy_climber", "crossbow",
    "darkchambers", "defender", "demon_attack", "donkey_kong", "double_dunk", "earthworld",
    "elevator_action", "enduro", "entombed", "et", "fishing_derby", "flag_capture",
    "freeway", "frogger", "frostbite", "galaxian", "gopher", "gravitar", "hangman",
    "haunted_house", "hero", "human_cannonball", "ice_hockey", "jamesbond",
    "journey_escape", "joust", "kaboom", "kangaroo", "keystone_kapers", "king_kong", "klax",
    "koolaid", "krull", "kung_fu_master", "laser_gates", "lost_luggage", "mario_bros",
    "maze_craze", "miniature_golf", "montezuma_revenge", "mr_do", "ms_pacman",
    "name_this_game", "othello", "pacman", "phoenix", "pitfall", "pitfall2", "pong",
    "pooyan", "private_eye", "qbert", "riverraid", "road_runner", "robotank", "seaquest",
    "sir_lancelot", "skiing", "solaris", "space_invaders", "space_war", "star_gunner",
    "superman", "surround", "tennis", "tetris", "tic_tac_toe_3d", "time_pilot", "trondead",
    "turmoil", "tutankham", "up_n_down", "venture", "video_checkers", "video_chess",
    "video_cube", "video_pinball", "warlords", "wizard_of_wor", "word_zapper",
    "yars_revenge", "zaxxon"
)
#: miniwob's task pages, by file stem.
MINIWOB_PAGES: Final = (
    "ascending-numbers", "bisect-angle", "book-flight", "book-flight-nodelay",
    "button-delay", "buy-ticket", "chase-circle", "choose-date", "choose-date-easy",
    "choose-date-medium", "choose-date-nodelay", "choose-list", "circle-center",
    "click-button", "click-button-sequence", "click-checkboxes", "click-checkboxes-large",
    "click-checkboxes-soft", "click-checkboxes-transfer", "click-collapsible",
    "click-collapsible-2", "click-collapsible-2-nodelay", "click-collapsible-nodelay",
    "click-color", "click-dialog", "click-dialog-2", "click-link", "click-menu",
    "click-menu-2", "click-option", "click-pie", "click-pie-nodelay", "click-scroll-list",
    "click-shades", "click-shape", "click-tab", "click-tab-2", "click-tab-2-easy",
    "click-tab-2-hard", "click-tab-2-medium", "click-test", "click-test-2",
    "click-test-transfer", "click-widget", "copy-paste", "copy-paste-2", "count-shape",
    "count-sides", "daily-calendar", "drag-box", "drag-circle", "drag-cube", "drag-items",
    "drag-items-grid", "drag-shapes", "drag-shapes-2", "drag-single-shape",
    "drag-sort-numbers", "draw-circle", "draw-line", "email-inbox", "email-inbox-delete",
    "email-inbox-forward", "email-inbox-forward-nl", "email-inbox-forward-nl-turk",
    "email-inbox-important", "email-inbox-nl-turk", "email-inbox-noscroll",
    "email-inbox-reply", "email-inbox-star-reply", "enter-date", "enter-password",
    "enter-text", "enter-text-2", "enter-text-dynamic", "enter-time", "find-greatest",
    "find-midpoint", "find-word", "focus-text", "focus-text-2", "form-sequence",
    "form-sequence-2", "form-sequence-3", "generate-number", "grid-coordinate",
    "guess-number", "highlight-text", "highlight-text-2", "hot-cold", "hover-shape",
    "identify-shape", "login-user", "login-user-popup", "moving-items", "multi-layouts",
    "multi-orderings", "navigate-tree", "number-checkboxes", "odd-or-even", "order-food",
    "phone-book", "read-table", "read-table-2", "resize-textarea", "right-angle",
    "scroll-text", "scroll-text-2", "search-engine", "sign-agreement", "simon-says",
    "simple-algebra", "simple-arithmetic", "social-media", "social-media-all",
    "social-media-some", "stock-market", "terminal", "text-editor", "text-transform",
    "tic-tac-toe", "unicode-test", "use-autocomplete", "use-autocomplete-nodelay",
    "use-colorwheel", "use-colorwheel-2", "use-slider", "use-slider-2", "use-spinner",
    "visual-addition"
)
