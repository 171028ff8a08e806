"""Word lists and templates of the synthetic mixed-session generator (``synthetic.py``).

Data only: names, relationships, the fact relations with their entity pools and paraphrased
templates, the projects of the threads, chit-chat and look-alike turns, the query templates and the
synonym table of paraphrased questions. Every relation has several first-person surface forms
(direct and indirect, e.g. "I work as a nurse." / "Long day at work again, that's life as a
nurse."), third-person phrases for egocentric memories (MiSC section 3.3: memories are written
from the main speaker's perspective), and questions, some worded unlike the statements and some
sharing a word with them (``LITERAL_ASKS``), so that a question never repeats its evidence turn and
lexical and dense retrieval behave differently. A project (``PROJECTS``) is a thread's words: how a
question names it (plainly or vaguely), the turns that open and follow up its sessions, other
people's projects of its kind (distractor turns) and its facts, relations of the main speaker.

Placeholders: ``{o}`` the object (entity), ``{a_o}`` the object with its indefinite article,
``{s}`` a speaker's name (questions; "I" in a thread's opening question), ``{name}`` another
speaker's name, ``{when}`` a time expression.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


def _v(values: str) -> tuple[str, ...]:
    """``"a|b|c"`` -> ``("a", "b", "c")``: compact entity pools."""
    return tuple(v.strip() for v in values.split("|"))


def article(word: str) -> str:
    """The indefinite article of ``word`` (the pools avoid the irregular cases)."""
    return "an" if word[:1].lower() in "aeiou" else "a"


@dataclass(frozen=True)
class Relation:
    """One kind of fact: (speaker, ``name``, object) with its entity pool and templates."""

    name: str                      # triplet relation, snake_case, e.g. "works_as"
    noun: str                      # what the fact is called in questions: "Mia's {noun}"
    vp: str                        # third-person verb phrase (memories): "works as {a_o}"
    you: str                       # the phrase after "you"/"they": "work as {a_o}"
    values: tuple[str, ...]        # the entity pool the object is drawn from
    say: tuple[str, ...]           # first-person statements, direct and indirect
    ask: tuple[str, ...]           # questions about {s}, worded unlike ``say``
    change: tuple[str, ...] = ()   # first-person update statements; empty: the fact never changes

    @property
    def mutable(self) -> bool:
        """True when the fact can change later (knowledge updates)."""
        return bool(self.change)

    def fill(self, template: str, value: str, **names: str) -> str:
        """Render ``template`` with the object ``value`` (and speaker names)."""
        return template.format(o=value, a_o=f"{article(value)} {value}", **names)

    def vp_now(self, value: str) -> str:
        """The verb phrase of a changed fact: "now works as a chef", "is now learning Dutch"."""
        vp = self.fill(self.vp, value)
        return "is now " + vp[3:] if vp.startswith("is ") else "now " + vp


RELATIONS: tuple[Relation, ...] = (
    Relation(
        "works_as", "job", "works as {a_o}", "work as {a_o}",
        _v("nurse|teacher|software engineer|chef|electrician|architect|pharmacist|librarian|"
           "firefighter|accountant|graphic designer|veterinarian|dentist|journalist|plumber|"
           "physiotherapist|baker|pilot|data analyst|lawyer|carpenter|social worker|translator|"
           "marine biologist|barista|paramedic|photographer|bus driver|florist|civil engineer"),
        ("I work as {a_o}.", "I've been {a_o} for a few years now.",
         "My job? I'm {a_o}, believe it or not.", "Long day at work again, that's life as {a_o}.",
         "Being {a_o} keeps me on my feet all week."),
        ("What does {s} do for a living?", "What is {s}'s occupation?", "What line of work is {s} in?"),
        ("Big news: I quit my old job and I'm {a_o} now.",
         "I switched careers, so these days I work as {a_o}.",
         "I finally made the move and started working as {a_o}."),
    ),
    Relation(
        "lives_in", "home city", "lives in {o}", "live in {o}",
        _v("Lisbon|Oslo|Montreal|Osaka|Nairobi|Melbourne|Valencia|Krakow|Denver|Edinburgh|Seoul|"
           "Cape Town|Lima|Reykjavik|Hamburg|Austin|Vancouver|Dublin|Bologna|Tallinn|Auckland|"
           "Marseille|Prague|Santiago|Hanoi|Helsinki|Boston|Ljubljana|Kyoto|Istanbul"),
        ("I live in {o}.", "My apartment in {o} is tiny but I love it.",
         "Home for me is {o} these days.", "The rent in {o} keeps going up, and I live right downtown."),
        ("Where does {s} live?", "Which city is {s} based in?", "In what city has {s} made a home?"),
        ("I moved! I'm living in {o} now.", "We packed everything up and relocated to {o}.",
         "Guess what, I just signed a lease in {o} and moved there."),
    ),
    Relation(
        "grew_up_in", "hometown", "grew up in {o}", "grew up in {o}",
        _v("Galway|Bergen|Salzburg|Cork|Aarhus|Ghent|Bruges|Savannah|Asheville|Cusco|Hobart|Nara|"
           "Sintra|Tromso|Girona|Lucca|Bath|York|Kilkenny|Annecy|Colmar|Taos|Durango|Hoi An"),
        ("I grew up in {o}.", "I was raised in {o}, a small place.",
         "Back in {o}, where I spent my childhood, everyone knew each other."),
        ("Where did {s} grow up?", "What is {s}'s hometown?", "Which town was {s} raised in?"),
    ),
    Relation(
        "has_pet", "pet", "has {a_o}", "have {a_o}",
        _v("beagle|tabby cat|parrot|hamster|golden retriever|bearded dragon|rabbit|corgi|goldfish|"
           "tortoise|husky|ferret|guinea pig|cockatiel|dachshund|border collie|Siamese cat|"
           "hedgehog|poodle|chinchilla"),
        ("I have {a_o} at home.", "My {o} woke me up at six again this morning.",
         "I adopted {a_o} from the shelter last year.",
         "Feeding and cleaning up after my {o} is my evening routine."),
        ("What kind of pet does {s} have?", "Which animal does {s} keep at home?",
         "What pet does {s} own?"),
    ),
    Relation(
        "enjoys_hobby", "hobby", "enjoys {o}", "enjoy {o}",
        _v("rock climbing|pottery|birdwatching|knitting|salsa dancing|chess|woodworking|kayaking|"
           "calligraphy|gardening|astronomy|origami|trail running|watercolor painting|fly fishing|"
           "scuba diving|archery|skateboarding|journaling|embroidery|geocaching|bouldering"),
        ("In my free time I do {o}.", "I spent the whole weekend on {o} again.",
         "Nothing relaxes me like {o}.", "I got hooked on {o} a while ago and can't stop."),
        ("What does {s} like to do in their spare time?", "Which pastime is {s} into?",
         "How does {s} usually unwind?"),
    ),
    Relation(
        "favorite_food", "favorite food", "loves eating {o}", "love eating {o}",
        _v("ramen|paella|tacos al pastor|butter chicken|sushi|lasagna|pho|falafel|pierogi|"
           "shakshuka|dumplings|moussaka|jollof rice|bibimbap|ceviche|goulash|pad thai|risotto|"
           "empanadas|kimchi stew|fish and chips|pupusas"),
        ("My favorite food is {o}.", "I could eat {o} every single day.",
         "Nothing beats a plate of {o} after a long week.",
         "Whenever we go out I end up ordering {o}."),
        ("What dish does {s} like best?", "Which meal would {s} happily have daily?",
         "What is {s}'s go-to comfort dish?"),
    ),
    Relation(
        "plays_instrument", "instrument", "plays the {o}", "play the {o}",
        _v("guitar|piano|violin|cello|drums|saxophone|ukulele|flute|trumpet|harp|banjo|accordion|"
           "clarinet|bass guitar|mandolin|harmonica"),
        ("I play the {o}.", "I practise the {o} most evenings.",
         "My neighbours probably hate my {o} practice.", "I've been taking lessons on the {o}."),
        ("Which instrument does {s} play?", "What musical instrument has {s} picked up?"),
    ),
    Relation(
        "studies", "field of study", "studies {o}", "study {o}",
        _v("marine ecology|art history|mechanical engineering|linguistics|economics|philosophy|"
           "computer science|psychology|urban planning|organic chemistry|film studies|astrophysics|"
           "anthropology|statistics|music theory|public health"),
        ("I'm studying {o} part time.", "My evening classes in {o} are tough.",
         "I enrolled in a course on {o}."),
        ("What subject is {s} studying?", "Which field is {s} taking classes in?"),
        ("I changed my major, I'm doing {o} now.", "I dropped my old course and switched to {o}."),
    ),
    Relation(
        "plans_trip_to", "travel plans", "is planning a trip to {o}", "are planning a trip to {o}",
        _v("Iceland|Peru|Japan|Morocco|New Zealand|Vietnam|Norway|Greece|Patagonia|Kenya|Portugal|"
           "Canada|Mexico|Scotland|Croatia|Sri Lanka|Jordan|Chile|Mongolia|Tanzania"),
        ("I'm planning a trip to {o} next year.", "I've started saving up for a holiday in {o}.",
         "I keep browsing flights to {o}, the trip is almost booked."),
        ("Where is {s} planning to travel?", "Which destination is {s}'s next journey to?",
         "Where is {s} going on their upcoming vacation?"),
        ("Change of plans: the trip is going to {o} instead.",
         "We cancelled the old trip, we're heading to {o} now."),
    ),
    Relation(
        "drives", "vehicle", "drives {a_o}", "drive {a_o}",
        _v("hatchback|pickup truck|electric sedan|vintage Beetle|minivan|motorbike|station wagon|"
           "convertible|hybrid SUV|camper van|scooter|jeep"),
        ("I drive {a_o}.", "My {o} barely made it up the hill today.", "I get around in {a_o} mostly."),
        ("What does {s} drive?", "What vehicle does {s} use to get around?"),
        ("I sold my old car and bought {a_o}.", "I traded in my ride for {a_o}."),
    ),
    Relation(
        "supports_team", "team", "supports {o}", "support {o}",
        _v("Arsenal|the Lakers|Boca Juniors|the Yankees|Ajax|the All Blacks|Celtic|the Packers|"
           "Bayern Munich|the Maple Leafs|Benfica|the Red Sox|Juventus|the Chicago Bulls|"
           "Galatasaray|the Seahawks"),
        ("I cheer for {o} every season.", "I never miss a match when {o} are playing.",
         "I've supported {o} since I was a kid."),
        ("Which team does {s} root for?", "What sports club is {s} a fan of?"),
    ),
    Relation(
        "allergic_to", "allergy", "is allergic to {o}", "are allergic to {o}",
        _v("peanuts|shellfish|pollen|dust mites|penicillin|strawberries|gluten|bee stings|sesame|"
           "latex|kiwi|eggs|soy|mold"),
        ("I'm allergic to {o}.", "I have to stay away from {o}, my allergy is pretty bad.",
         "One brush with {o} and I break out in hives."),
        ("What is {s} allergic to?", "Which allergy does {s} have to watch out for?"),
    ),
    Relation(
        "listens_to", "music taste", "listens to {o}", "listen to {o}",
        _v("jazz|heavy metal|bossa nova|K-pop|bluegrass|techno|reggae|opera|indie folk|hip hop|"
           "classical music|punk rock|synthwave|blues|country music|afrobeat"),
        ("I mostly listen to {o}.", "My playlists are all {o}.",
         "I went to a concert last month, {o} all night, and loved it."),
        ("What kind of music does {s} like?", "Which music genre does {s} have on repeat?"),
    ),
    Relation(
        "is_learning_language", "language", "is learning {o}", "are learning {o}",
        _v("Portuguese|Japanese|Swahili|German|Korean|Italian|Arabic|Mandarin|Finnish|Turkish|"
           "Dutch|Greek|Polish|Hindi|Russian|Icelandic"),
        ("I'm learning {o}.", "I practise my {o} with an app every morning.",
         "My {o} teacher gave me so much homework."),
        ("Which language is {s} trying to learn?", "What language has {s} been practising?"),
        ("I gave up on the old language and started {o} instead.", "I switched to learning {o}."),
    ),
    Relation(
        "watches_show", "current show", "is watching {o}", "are watching {o}",
        _v("Harbor Lights|The Long Orbit|Copper Valley|Quiet Streets|Northern Line|The Glass Garden|"
           "Salt and Stone|Paper Moons|Iron Coast|The Last Orchard|Velvet Hour|Distant Shores|"
           "Night Market|Hollow Pines"),
        ("I'm binge-watching {o} right now.", "I stayed up way too late watching {o}.",
         "I'm completely hooked on {o} at the moment."),
        ("Which series is {s} watching?", "What show has {s} been glued to?"),
        ("I finished that series, now I'm watching {o}.", "I dropped the old show and started {o}."),
    ),
    Relation(
        "collects", "collection", "collects {o}", "collect {o}",
        _v("vinyl records|stamps|vintage postcards|comic books|fountain pens|old maps|coins|sneakers|"
           "film cameras|seashells|tea tins|snow globes|enamel pins|matchbox cars"),
        ("I collect {o}.", "My shelves are full of {o}, I can't stop buying them.",
         "I found two more {o} at the flea market."),
        ("What does {s} collect?", "Which items does {s} hoard at home?"),
    ),
    Relation(
        "volunteers_at", "volunteering", "volunteers at {o}", "volunteer at {o}",
        _v("the animal shelter|a food bank|the public library|a soup kitchen|a hospice|"
           "the community garden|a youth football club|a literacy program|the local museum|"
           "a wildlife rescue|a homeless shelter|the beach cleanup crew"),
        ("I volunteer at {o} on weekends.", "I spent Saturday helping out at {o}.",
         "Giving a few hours a week to {o} keeps me grounded."),
        ("Where does {s} volunteer?", "Which place does {s} give their time to?"),
    ),
    Relation(
        "saving_for", "savings goal", "is saving for {o}", "are saving for {o}",
        _v("a house deposit|a new laptop|a wedding|a sailboat|a year abroad|a vintage guitar|"
           "a road trip|an electric bike|a camera lens|a kitchen renovation|grad school|a piano"),
        ("I'm saving up for {o}.", "Every spare coin goes into the fund for {o}.",
         "No takeout this month, I'm putting money aside for {o}."),
        ("What is {s} putting money aside for?", "What savings target does {s} have?"),
        ("I've changed my savings goal, it's for {o} now.",
         "Forget the old goal, I'm saving for {o} these days."),
    ),
    Relation(
        "training_for", "training goal", "is training for {o}", "are training for {o}",
        _v("a marathon|a half marathon|a triathlon|a cycling race|a swim meet|a powerlifting meet|"
           "a 10k run|an obstacle race|a hiking expedition|a climbing competition|a boxing match|"
           "a rowing regatta"),
        ("I'm training for {o}.", "Up at five again to train for {o}.",
         "My coach has me on a strict plan for {o}."),
        ("What event is {s} preparing for?", "What competition is {s} getting in shape for?"),
        ("I signed up for {o} instead now.", "New goal: I'm preparing for {o}."),
    ),
    Relation(
        "favorite_drink", "favorite drink", "loves drinking {o}", "love drinking {o}",
        _v("green tea|espresso|chai latte|kombucha|hot chocolate|lemonade|matcha|iced coffee|"
           "ginger beer|mint tea|oat flat white|cold brew|rooibos|mango lassi"),
        ("I can't start my day without {o}.", "My usual order is {o}.", "I drink way too much {o}."),
        ("What does {s} like to drink?", "What is {s}'s usual beverage?"),
    ),
    Relation(
        "works_at", "workplace", "works at {o}", "work at {o}",
        _v("a hospital|a primary school|a startup|a bakery|a law firm|a museum|a hotel|a bank|"
           "a newspaper|a bookstore|an airline|the city council|a zoo|a gym|a theatre|a brewery|"
           "a clinic|a shipyard"),
        ("I work at {o} downtown.", "Things are hectic at {o} where I work.", "My office is at {o}."),
        ("Where is {s} employed?", "At what kind of place does {s} have a job?"),
        ("I got a new position at {o}.", "I left my old workplace and joined {o}."),
    ),
    Relation(
        "has_sibling", "sibling", "has {a_o}", "have {a_o}",
        _v("older brother|younger sister|twin sister|stepbrother|half sister|younger brother|"
           "older sister|stepsister|half brother|twin brother"),
        ("I have {a_o}.", "My {o} called me last night for advice.", "I'm visiting my {o} next weekend."),
        ("What sibling does {s} have?", "Which brother or sister has {s} talked about?"),
    ),
    Relation(
        "has_child", "children", "has {o}", "have {o}",
        _v("a newborn son|a toddler daughter|twin boys|a teenage daughter|a son in kindergarten|"
           "two daughters|a grown-up son|a baby girl|three kids|a teenage son"),
        ("I have {o}.", "Life with {o} is exhausting but wonderful.", "Parenting {o} keeps me busy."),
        ("What children does {s} have?", "Who are {s}'s kids?"),
    ),
    Relation(
        "reads", "reading taste", "reads {o}", "read {o}",
        _v("mystery novels|science fiction|poetry|biographies|fantasy sagas|graphic novels|"
           "historical fiction|thrillers|travel memoirs|self-help books|romance novels|"
           "philosophy books"),
        ("I'm mostly reading {o} lately.", "My nightstand is stacked with {o}.",
         "I joined a book club that only does {o}."),
        ("What does {s} like to read?", "Which books does {s} pick up?"),
    ),
    Relation(
        "afraid_of", "fear", "is afraid of {o}", "are afraid of {o}",
        _v("heights|spiders|deep water|flying|thunderstorms|clowns|snakes|the dark|public speaking|"
           "needles|crowds|elevators"),
        ("I'm terrified of {o}.", "I've always had a fear of {o}.",
         "My therapist is helping me with my fear of {o}."),
        ("What is {s} scared of?", "What phobia does {s} have?"),
    ),
    Relation(
        "plays_sport", "sport", "plays {o}", "play {o}",
        _v("tennis|badminton|volleyball|basketball|squash|table tennis|rugby|field hockey|cricket|"
           "handball|water polo|ultimate frisbee|golf|baseball"),
        ("I play {o} twice a week.", "We won our {o} match on Sunday.", "I joined {a_o} league this year."),
        ("What sport does {s} play?", "Which sport is {s} in a league for?"),
    ),
    Relation(
        "follows_diet", "diet", "follows {a_o}", "follow {a_o}",
        _v("vegetarian diet|vegan diet|keto diet|gluten-free diet|pescatarian diet|low-carb diet|"
           "dairy-free diet|paleo diet|Mediterranean diet|low-sodium diet"),
        ("I'm on {a_o}.", "I've been sticking to {a_o} for months.",
         "My doctor suggested {a_o}, so I'm trying it."),
        ("What eating plan is {s} on?", "What kind of diet does {s} keep?"),
        ("I've switched to {a_o}.", "I dropped my old eating plan and went on {a_o}."),
    ),
    Relation(
        "birthday_in", "birthday", "has a birthday in {o}", "have a birthday in {o}",
        _v("January|February|March|April|May|June|July|August|September|October|November|December"),
        ("My birthday is in {o}.", "I was born in {o}.", "I'll be celebrating another year older in {o}."),
        ("When is {s}'s birthday?", "In which month was {s} born?"),
    ),
    Relation(
        "favorite_color", "favorite color", "likes the color {o}", "like the color {o}",
        _v("teal|mustard yellow|burgundy|forest green|lavender|coral|navy blue|charcoal grey|"
           "turquoise|maroon|olive|peach"),
        ("My favorite color is {o}.", "I'd paint everything {o} if I could.", "Half my wardrobe is {o}."),
        ("Which color does {s} like best?", "What color does {s} prefer?"),
    ),
    Relation(
        "grows", "garden", "grows {o}", "grow {o}",
        _v("tomatoes|bonsai trees|orchids|succulents|chili peppers|sunflowers|basil|roses|cacti|"
           "blueberries|ferns|pumpkins"),
        ("I grow {o} on my balcony.", "My little garden is full of {o}.", "I'm growing {o} this year."),
        ("What does {s} grow at home?", "Which plants is {s} cultivating?"),
    ),
    Relation(
        "is_learning_to", "new skill", "is learning to {o}", "are learning to {o}",
        _v("sail|surf|sew|snowboard|juggle|weld|code in Python|ice skate|ride a unicycle|brew beer|"
           "do magic tricks|speak in public"),
        ("I'm learning to {o}.", "I signed up for lessons to learn to {o}.",
         "Slowly but surely I'm figuring out how to {o}."),
        ("What new skill is {s} picking up?", "What is {s} taking lessons in?"),
        ("I dropped those lessons, now I'm learning to {o}.", "New project: I'm teaching myself to {o}."),
    ),
    Relation(
        "home_type", "home", "lives in {a_o}", "live in {a_o}",
        _v("studio flat|houseboat|farmhouse|loft|townhouse|cabin|shared flat|bungalow|tiny house|"
           "penthouse"),
        ("Home is {a_o} with creaky floors.", "Our place is {a_o}, nothing fancy.",
         "I rent {a_o} near the park."),
        ("What kind of home does {s} have?", "What sort of place does {s} rent?"),
        ("We moved out and into {a_o}.", "I gave notice and moved into {a_o}."),
    ),
)

@dataclass(frozen=True)
class Project:
    """A project the main speaker works on over several sessions (a thread, as RealMem's project threads): its
    words, the turns that open or continue a session of it, the partner's follow-ups, the look-alike turns of
    distractor sessions (someone else's project of the same kind), and its facts (``slots``, each a
    :class:`Relation` of the main speaker that can change later in the thread)."""

    name: str                      # "kitchen"
    label: str                     # "the kitchen renovation" (summaries)
    hints: tuple[str, ...]         # how a question names it with the statements' words ("the kitchen renovation")
    vague: tuple[str, ...]         # how a paraphrased question names it, sharing none of those words
    opens: tuple[str, ...]         # the first turn of the thread's first session (no fact)
    again: tuple[str, ...]         # the first turn of a later session of the thread (no fact)
    follow_ups: tuple[str, ...]    # the partner's turns about it (no fact)
    decoys: tuple[str, ...]        # someone else's project of the same kind ({name}: a speaker of the episode)
    decoy_topic: str               # what a summary calls the decoys' small talk
    slots: tuple[Relation, ...]    # the facts of the thread, all of the main speaker, all mutable


# More questions per relation, worded like its statements this time (each shares a word with some of them, "What
# work does {s} do?" / "I work as a nurse."): the generator asks with a question that shares a word with the
# evidence turn (lexical match works) unless the question is paraphrased (then one that shares none, its words
# swapped through SYNONYMS).
LITERAL_ASKS = {
    "works_as": ("What work does {s} do?", "What job does {s} have?"),
    "lives_in": ("Which city does {s} live in?", "Where did {s} move to?"),
    "grew_up_in": ("Where was {s} raised?", "Where did {s} spend their childhood?"),
    "has_pet": ("What pet does {s} have at home?", "Which pet woke {s} up at six?"),
    "enjoys_hobby": ("What does {s} do in their free time?", "What relaxes {s}?", "How did {s} spend the weekend?"),
    "favorite_food": ("What is {s}'s favorite food?", "What food could {s} eat every day?"),
    "plays_instrument": ("Which instrument does {s} practise?", "What instrument is {s} taking lessons on?"),
    "studies": ("What course is {s} taking?", "What is {s} studying part time?"),
    "plans_trip_to": ("Where is {s} planning a trip to?", "Where is {s}'s next trip?"),
    "drives": ("What car does {s} drive?", "What ride did {s} get?"),
    "supports_team": ("Which team does {s} cheer for?", "Which team has {s} supported since they were a kid?"),
    "allergic_to": ("What allergy does {s} have?",),
    "listens_to": ("What music does {s} listen to?", "What is on {s}'s playlists?"),
    "is_learning_language": ("Which language is {s} learning?", "Which language does {s} practise with an app?"),
    "watches_show": ("What show is {s} hooked on?",),
    "collects": ("What is on {s}'s shelves?", "What did {s} find at the flea market?"),
    "volunteers_at": ("Where does {s} spend weekends helping?",),
    "saving_for": ("What is {s} saving for?", "What is {s}'s savings goal?"),
    "training_for": ("What is {s} training for?", "What is {s}'s coach preparing them for?"),
    "favorite_drink": ("What is {s}'s usual order?", "What does {s} drink every day?"),
    "works_at": ("Where does {s} work?", "Where is {s}'s office?"),
    "has_sibling": ("Who called {s} for advice?", "Which sibling is {s} visiting?"),
    "has_child": ("Who is {s} parenting?", "Who keeps {s} busy at home?"),
    "reads": ("What is {s} reading these days?", "What book club did {s} join?"),
    "afraid_of": ("What is {s}'s fear?", "What has {s} always had a fear of?"),
    "plays_sport": ("What sport did {s} join a league for?", "What match did {s} win?"),
    "follows_diet": ("What diet is {s} sticking to?", "What eating plan did {s} switch to?"),
    "birthday_in": ("In which month is {s}'s birthday?",),
    "favorite_color": ("What is {s}'s favorite color?", "What color is half of {s}'s wardrobe?"),
    "grows": ("What is in {s}'s garden?", "What does {s} grow on the balcony?"),
    "is_learning_to": ("What is {s} learning to do?", "What did {s} sign up for lessons in?"),
    "home_type": ("What place does {s} rent?", "What kind of home did {s} move into?"),
}
RELATIONS = tuple(replace(r, ask=r.ask + LITERAL_ASKS.get(r.name, ())) for r in RELATIONS)


PROJECTS: tuple[Project, ...] = (
    Project(
        "kitchen", "the kitchen renovation", ("the kitchen renovation", "the kitchen project"),
        ("the home makeover", "the remodelling at my flat", "the overhaul of where I cook"),
        ("I've finally decided to renovate the kitchen this year.",
         "Big decision: the kitchen renovation is happening, the old cabinets are coming out."),
        ("Quick update on the kitchen renovation.", "The kitchen is still a building site, but the renovation moves.",
         "More kitchen renovation news, if you can stand it."),
        ("How is the kitchen renovation coming along?", "Renovations always take longer than planned, hang in there.",
         "Send me photos of the kitchen when it's done."),
        ("My sister renovated her kitchen last year and the budget doubled.",
         "{name} told me their contractor vanished halfway through a bathroom renovation.",
         "I watched a show where they redid a whole kitchen in a weekend, new countertops and all.",
         "Our neighbours are renovating their kitchen too, the drilling starts at seven."),
        "other people's renovations",
        (
            Relation("kitchen_budget", "kitchen budget", "has a kitchen budget of {o}", "have a kitchen budget of {o}",
                     _v("8,000 euros|12,000 euros|5,500 euros|15,000 euros|9,500 euros|20,000 euros|7,000 euros|"
                        "11,000 euros|6,500 euros|18,000 euros"),
                     ("For the kitchen renovation I set the budget at {o}.",
                      "The bank approved {o} for the kitchen, that's the budget.",
                      "We agreed the kitchen can't cost more than {o} in total."),
                     ("What budget did {s} set for the kitchen?",
                      "How much money did {s} set aside for the kitchen renovation?"),
                     ("The kitchen budget went up, we're at {o} now.",
                      "We had to revise the renovation budget to {o}.")),
            Relation("kitchen_contractor", "kitchen contractor", "is renovating the kitchen with {o}",
                     "are renovating the kitchen with {o}",
                     _v("Oakline Builders|Brightstone Renovations|Hammer and Sons|Carter Construction|"
                        "Northside Builders|BlueBeam Contracting|Castle Carpentry|Redbrick Renovations|"
                        "Summit Interiors|Lakeside Builders"),
                     ("We hired {o} as the contractor for the kitchen.",
                      "I signed the contract with {o} to do the kitchen.",
                      "The crew from {o} starts on the kitchen next week."),
                     ("Which contractor did {s} hire for the kitchen?", "Who did {s} pick to do the kitchen work?"),
                     ("We fired the first contractor and hired {o} instead.",
                      "The kitchen job went to {o} after the first crew quit.")),
            Relation("kitchen_countertops", "countertops", "wants {o} countertops in the kitchen",
                     "want {o} countertops in the kitchen",
                     _v("oak|marble|granite|concrete|quartz|walnut|terrazzo|slate|soapstone|bamboo|stainless steel|"
                        "butcher block"),
                     ("We picked {o} for the kitchen countertops.",
                      "The new kitchen worktops will be {o}, I love the look.",
                      "I finally chose the countertops: {o}, no more laminate."),
                     ("What countertops did {s} choose for the kitchen?",
                      "Which material will {s} use for the kitchen worktops?"),
                     ("I changed my mind on the countertops, it's {o} now.",
                      "We swapped the countertop order for {o}.")),
        ),
    ),
    Project(
        "wedding", "the wedding", ("the wedding plans", "the wedding"),
        ("the day I tie the knot", "the day I say my vows", "my trip to the altar"),
        ("We set a date, so the wedding planning starts now!",
         "I'm officially planning the wedding, and I have no idea where to start."),
        ("More wedding planning news.", "The wedding plans took another turn this week.",
         "Wedding update, brace yourself."),
        ("How are the wedding preparations going?", "Weddings are so much work, I remember ours.",
         "Tell me when the wedding invitations go out."),
        ("My cousin's wedding had a terrible band, everyone left early.",
         "{name} went to a wedding at a vineyard and said the venue was magical.",
         "Wedding season again, I have three invitations this summer.",
         "A friend of mine just cancelled her wedding, the guests were already booked."),
        "other people's weddings",
        (
            Relation("wedding_venue", "wedding venue", "is getting married at {o}", "are getting married at {o}",
                     _v("a vineyard in the hills|an old barn|the botanical garden|a lakeside lodge|a rooftop terrace|"
                        "the town hall|a seaside hotel|a converted mill|a castle courtyard|the city library"),
                     ("We booked {o} as the wedding venue.",
                      "The wedding will be at {o}, we saw it and fell in love.",
                      "We put down a deposit on {o} for the ceremony."),
                     ("Where did {s} book the wedding?", "Which venue did {s} choose for the wedding?"),
                     ("We lost the old venue, the wedding moves to {o}.",
                      "Change of venue: we're getting married at {o} instead.")),
            Relation("wedding_guests", "guest count", "is inviting {o} to the wedding",
                     "are inviting {o} to the wedding",
                     _v("80 guests|120 guests|45 guests|150 guests|60 guests|200 guests|95 guests|30 guests|"
                        "110 guests|70 guests"),
                     ("The guest list is at {o} for the wedding.", "We're inviting {o}, no more.",
                      "After a lot of arguing we settled on {o} for the wedding."),
                     ("How many people did {s} invite to the wedding?",
                      "How big a guest list did {s} settle on for the wedding?"),
                     ("We cut the guest list down to {o}.", "The guest list grew again, it's {o} now.")),
            Relation("wedding_music", "wedding band", "has {o} playing at the wedding",
                     "have {o} playing at the wedding",
                     _v("a jazz trio|a string quartet|a DJ|a swing band|a folk duo|a cover band|a steel drum band|"
                        "a gospel choir|a mariachi band|a harpist"),
                     ("We booked {o} to play at the wedding.", "The music is sorted, {o} will play the reception.",
                      "I heard {o} at a party and hired them for the wedding on the spot."),
                     ("What music did {s} book for the wedding?", "Who did {s} book to play at the wedding?"),
                     ("The first band cancelled, so {o} is playing now.", "We switched the wedding music to {o}.")),
        ),
    ),
    Project(
        "podcast", "the podcast", ("the podcast", "the podcast project"),
        ("the audio show I'm launching", "my recording side hustle", "my radio show idea"),
        ("I'm starting a podcast, I've wanted to for years.",
         "So I bought a microphone: the podcast is really happening."),
        ("Podcast update: we recorded a test episode.", "Back to the podcast for a second.",
         "The podcast is eating all my evenings."),
        ("How is the podcast going?", "I'd listen to your podcast, send me the link.",
         "Podcasts are everywhere now, good luck standing out."),
        ("{name} listens to a podcast about true crime every night.",
         "My coworker launched a podcast and has three listeners, one is his mum.",
         "I heard a podcast episode about sleep that changed my routine.",
         "Everyone at work is starting a podcast these days."),
        "other people's podcasts",
        (
            Relation("podcast_name", "podcast name", "is calling the podcast {o}", "are calling the podcast {o}",
                     _v("Small Talk Big Ideas|The Night Shift|Second Breakfast|Loose Threads|The Slow Lane|Open Tabs|"
                        "Field Notes|Half Past Nine|Plot Twist|Common Ground"),
                     ("The podcast will be called {o}.", "We settled on a name for the podcast: {o}.",
                      "I registered {o} as the podcast title."),
                     ("What did {s} decide to call the podcast?", "Which name did {s} pick for the podcast?"),
                     ("We renamed the podcast to {o}.", "New name for the podcast: {o}, the old one was taken.")),
            Relation("podcast_topic", "podcast topic", "is making a podcast about {o}",
                     "are making a podcast about {o}",
                     _v("urban gardening|true crime|personal finance|local history|board games|indie films|"
                        "climate news|cheap cooking|startup stories|mental health"),
                     ("The podcast is going to be about {o}.", "Each episode of the podcast covers {o}.",
                      "I want the podcast to focus on {o}."),
                     ("What will {s} talk about on the podcast?", "What subject did {s} choose for the podcast?"),
                     ("We changed the podcast's focus to {o}.", "The podcast pivoted, it's about {o} now.")),
            Relation("podcast_schedule", "release schedule", "releases podcast episodes {o}",
                     "release podcast episodes {o}",
                     _v("every Monday|every other Friday|twice a month|every Wednesday|once a month|every Sunday night|"
                        "every Tuesday morning|each Thursday|every other Monday|every Saturday"),
                     ("New podcast episodes will come out {o}.", "We'll publish the podcast {o}, that's the plan.",
                      "I can manage one podcast episode {o}."),
                     ("How often will {s} put out podcast episodes?",
                      "What release schedule did {s} plan for the podcast?"),
                     ("We moved the podcast schedule to {o}.",
                      "Episodes come out {o} now, the old pace was too much.")),
        ),
    ),
    Project(
        "novel", "the novel", ("the novel", "the novel I'm writing"),
        ("the book I keep scribbling", "my manuscript", "the fiction I've been drafting"),
        ("I've started writing a novel, don't laugh.", "I'm finally writing that novel, I do an hour every morning."),
        ("The novel is moving again, I wrote a whole chapter.", "News on the novel front.",
         "I've been stuck on the novel, but I made a decision."),
        ("How is the novel going?", "I can't wait to read the novel.", "Writing a whole novel sounds exhausting."),
        ("{name} is reading a novel that's eight hundred pages long.",
         "My aunt self-published a novel and sold twelve copies.",
         "I read that most first novels get rejected by every publisher.",
         "The book club picked a novel I couldn't finish."),
        "other people's novels",
        (
            Relation("novel_title", "novel title", "is writing a novel called {o}", "are writing a novel called {o}",
                     _v("The Salt Road|Winter Orchard|A House of Echoes|The Last Ferry|Glass Rivers|Under Copper Skies|"
                        "The Quiet Year|Paper Lanterns|North of Nowhere|The Lighthouse Keeper"),
                     ("The novel has a working title: {o}.", "I'm calling the novel {o}.",
                      "The first page of my novel says {o}, and I like it."),
                     ("What title did {s} give the novel?", "What will {s} call the novel?"),
                     ("I retitled the novel {o}.", "The novel is called {o} now, the old title was too gloomy.")),
            Relation("novel_genre", "novel genre", "is writing {o}", "are writing {o}",
                     _v("a cozy mystery|a space opera|a family saga|a ghost story|a heist thriller|"
                        "a historical romance|a coming-of-age story|a political thriller|a fantasy epic|a satire"),
                     ("The novel is {o}, at least so far.", "I'm writing {o}, my first try at one.",
                      "My novel turned into {o} somehow."),
                     ("What kind of novel did {s} decide to write?", "Which genre did {s} go with for the novel?"),
                     ("I rewrote the novel as {o}.", "The novel is {o} now, I changed the whole plot.")),
            Relation("novel_publisher", "publisher", "is working with {o} on the novel",
                     "are working with {o} on the novel",
                     _v("Harbor Press|Bluebird Books|Lantern House|Quill and Ink|Northlight Publishing|Red Fox Press|"
                        "Meridian Books|Stonebridge Press|Wildwood Publishing|Open Door Books"),
                     ("I sent the novel to {o} and they want it.", "An editor at {o} offered to publish the novel.",
                      "I signed with {o} for the novel."),
                     ("Which publisher did {s} sign with for the novel?", "Who will publish the novel {s} wrote?"),
                     ("The novel moved to {o}, the first publisher folded.",
                      "I switched publishers, the novel is with {o} now.")),
        ),
    ),
    Project(
        "cafe", "the cafe", ("the cafe", "the cafe I'm opening"),
        ("my espresso bar idea", "the small business I want to start", "the espresso place plan"),
        ("I'm going to open a cafe, I handed in my notice.", "The cafe is no longer a dream, I'm opening one."),
        ("Cafe news!", "A quick update about the cafe.", "The cafe plans changed a bit."),
        ("How is the cafe coming along?", "I'll be your first customer at the cafe.",
         "Opening a cafe is brave, the hours are brutal."),
        ("{name} says the new cafe downtown has terrible coffee.",
         "A cafe near my place closed after six months, the rent killed it.",
         "My friend runs a cafe and hasn't had a holiday in years.",
         "I spent the whole afternoon working from a cafe."),
        "other people's cafes",
        (
            Relation("cafe_location", "cafe location", "is opening a cafe at {o}", "are opening a cafe at {o}",
                     _v("the old train station|Elm Street|the harbour front|the university quarter|Market Square|"
                        "the arts district|Riverside Avenue|Baker Lane|the industrial park|the high street"),
                     ("I signed a lease for the cafe at {o}.", "The cafe will be at {o}, lots of foot traffic.",
                      "We found the perfect spot for the cafe: {o}."),
                     ("Where will {s} open the cafe?", "Which spot did {s} find for the cafe?"),
                     ("The cafe is moving to {o}, the first lease fell through.",
                      "We switched the cafe location to {o}.")),
            Relation("cafe_name", "cafe name", "is naming the cafe {o}", "are naming the cafe {o}",
                     _v("The Daily Grind|Bean There|Morning Ritual|The Copper Cup|Steam and Crumb|Little Owl Coffee|"
                        "The Roastery|Sunny Side|Grounds for Joy|The Corner Pot"),
                     ("The cafe will be called {o}.", "I ordered the sign for the cafe: {o}.",
                      "We're naming the cafe {o}."),
                     ("What did {s} decide to name the cafe?", "What name will {s} put over the cafe door?"),
                     ("We renamed the cafe {o}.", "New name for the cafe: {o}, the old one was taken.")),
            Relation("cafe_pastry", "signature pastry", "plans to sell {o} at the cafe", "plan to sell {o} at the cafe",
                     _v("cardamom buns|pistachio croissants|lemon tarts|cinnamon rolls|banana bread|almond cake|"
                        "olive focaccia|apple turnovers|chocolate babka|sesame bagels"),
                     ("The signature pastry at the cafe will be {o}.",
                      "I tested recipes all week, {o} will be our thing at the cafe.",
                      "The cafe menu will be built around {o}."),
                     ("Which pastry will {s} be known for at the cafe?",
                      "What bake did {s} pick as the cafe's speciality?"),
                     ("We dropped the old bake and went with {o} for the cafe.",
                      "The cafe's signature bake is {o} now.")),
        ),
    ),
    Project(
        "party", "the surprise party", ("the surprise party", "mum's surprise party"),
        ("the celebration for my mother", "the secret birthday thing for my mother", "my mother's big do"),
        ("Mum turns seventy, so I'm throwing her a surprise party.", "I've started planning a surprise party for mum."),
        ("Surprise party update, she still suspects nothing.", "More on mum's surprise party.",
         "The surprise party plans keep changing."),
        ("How are the surprise party plans?", "Your mum is going to cry at that party.",
         "Don't let the surprise slip!"),
        ("{name} threw a surprise party once and the guest of honour never showed up.",
         "My neighbour's birthday party went on until three in the morning.",
         "I hate surprise parties, I never know what face to make.",
         "We had a party at the office and the cake was gone in a minute."),
        "other people's parties",
        (
            Relation("party_venue", "party venue", "is throwing the surprise party at {o}",
                     "are throwing the surprise party at {o}",
                     _v("an Italian restaurant|our back garden|a bowling alley|a rented boat|a karaoke bar|"
                        "the community hall|a riverside picnic spot|a rooftop bar|a cooking school|a jazz club"),
                     ("The surprise party will be at {o}.", "I booked {o} for mum's party.",
                      "We're holding mum's surprise party at {o}."),
                     ("Where will {s} throw the surprise party?", "Which place did {s} book for mum's party?"),
                     ("The party moved to {o}, the first place was double booked.",
                      "Change of plan: mum's party is at {o} now.")),
            Relation("party_cake", "party cake", "is serving {o} at the party", "are serving {o} at the party",
                     _v("carrot cake|black forest cake|lemon drizzle cake|red velvet cake|tiramisu|cheesecake|"
                        "Victoria sponge|chocolate fudge cake|coconut cake|pavlova"),
                     ("I ordered {o} for mum's party.", "The bakery is making {o} for the surprise party.",
                      "There will be {o} at the party, her favourite."),
                     ("What cake did {s} order for the party?", "Which dessert will {s} serve at mum's party?"),
                     ("We changed the cake order to {o}.", "The bakery talked me into {o} for the party.")),
            Relation("party_theme", "party theme", "has {o} as the party theme", "have {o} as the party theme",
                     _v("the seventies|Hollywood glamour|a garden party|a Hawaiian luau|a masquerade|"
                        "a vintage tea party|"
                        "Paris|a country fair|a beach party|the roaring twenties"),
                     ("The theme of the party is {o}.", "Everyone has to dress for {o} at mum's party.",
                      "I picked {o} as the theme for the party."),
                     ("What theme did {s} pick for the party?", "What dress code did {s} set for the party?"),
                     ("We changed the party theme to {o}.",
                      "The theme is {o} now, the old one was too hard to dress for.")),
        ),
    ),
)
PROJECT_RELATIONS: tuple[Relation, ...] = tuple(slot for p in PROJECTS for slot in p.slots)
RELATION_BY_NAME = {r.name: r for r in RELATIONS + PROJECT_RELATIONS}

NAMES = _v(
    "Ana|Mia|Leo|Noah|Ivy|Omar|Sara|Kenji|Lena|Tariq|Zoe|Ravi|Elena|Mateo|Priya|Jonas|Aisha|Felix|"
    "Chloe|Diego|Hana|Ibrahim|Julia|Kofi|Laila|Marco|Nadia|Oscar|Petra|Quinn|Rosa|Samir|Tessa|Umar|"
    "Vera|Wei|Yara|Zane|Amara|Bruno|Carmen|Dev|Esme|Farid|Greta|Hugo|Ines|Jin|Kira|Luca|Maya|Nico|"
    "Olga|Pablo|Rhea|Sven|Talia|Uri|Valeria|Wren|Xavi|Yusuf|Alba|Bjorn|Cleo|Dario|Eva|Finn|Gia|"
    "Hamid|Iris|Jasper|Kaia|Lars|Mina|Nora|Otto|Paloma|Rafael|Selin|Theo|Una|Viktor|Willa|Yosef|"
    "Zara|Anouk|Basil|Clara|Dmitri|Elif|Freya|Gabriel|Helga|Ilan|Juno|Kai|Lucia|Milo|Nell|Orla|"
    "Pedro|Rania|Silas|Tomas|Ulla|Vivek|Yuki|Ada|Bea|Cyrus|Dina|Emil|Flora|Goran|Hye|Ilse|Joel|"
    "Keira|Lior|Marta|Nils|Ofelia|Piet|Rufus|Sana|Tobias|Ugo|Vesna|Wanda|Yann|Zora|Arlo|Bodhi|"
    "Cosima|Dagny|Eero|Fatima|Gus|Heloise|Idris|Jovan|Kalani|Lumi|Manon|Nuri|Odile|Penn"
)

PARTNER_ROLES = _v(
    "coworker|neighbour|college roommate|personal trainer|cousin|best friend|manager|landlord|"
    "bandmate|book club friend|family doctor|mentor|childhood friend|teammate|yoga instructor|"
    "business partner|classmate|hairdresser|tutor|therapist|carpool buddy|gym buddy"
)

GREETINGS = ("Hi {name}!", "Hey {name}, good to see you.", "{name}! It's been a while.",
             "Hello {name}, how have you been?", "Oh hi {name}, perfect timing.")
GREETING_REPLIES = ("Hi {name}!", "Hey {name}, great to see you too.", "Hello {name}!",
                    "Good to see you, {name}.")
REACTIONS = ("Oh nice!", "Really?", "That's great.", "Wow.", "Ha, I didn't know that.",
             "Sounds lovely.", "No way!", "Good for you.", "Interesting.", "Oh, cool.",
             "That's lovely to hear.", "Huh, fair enough.")
FOLLOW_UPS = (" What about you?", " How about you?", " Anyway, what's new with you?",
              " Have you been up to anything similar?")

# Main speaker refers back to an earlier memory (the turn carries that memory's id as its tag).
RECALL_PARTNER = ("Last time you mentioned that you {you}. How is that going?",
                  "I remember you {you}, right?",
                  "You told me before that you {you}; any news on that front?",
                  "Since you {you}, I thought of you the other day.")
RECALL_OTHER = ("By the way, {name} {vp}, did you know that?",
                "I was chatting with {name} recently; apparently {name} {vp}.",
                "You know {name}? {name} {vp}, as far as I remember.")
RECALL_SELF = ("As I mentioned before, ", "Like I told you last time, ", "As you may remember, ")

# Chit-chat: (topic, template). These turns carry no fact about a speaker; some name an entity
# of the pools on purpose (lexical distractors for retrieval).
CHIT_CHAT = (
    ("work", "What a week, I barely had time to breathe."),
    ("the weather", "The weather has been so {weather} lately."),
    ("the weather", "It's been {weather} all week, hasn't it?"),
    ("the weather", "Do you think it will rain on {day}?"),
    ("traffic", "Traffic this morning was unbelievable, I was stuck for {n} minutes."),
    ("the news", "I read a funny article about {city} this morning."),
    ("the news", "Did you hear they might build a new stadium near {city}?"),
    ("food", "Someone at the market was selling {food} for half price, wild."),
    ("food", "I saw a recipe for {food} online but it looked way too complicated."),
    ("phones", "My phone battery died twice today, I need a new charger."),
    ("rest", "Honestly I just want a long nap this weekend."),
    ("rest", "It's been ages since I had a proper day off."),
    ("music", "That song they keep playing on the radio is stuck in my head."),
    ("sports", "Did you catch the game on {day}? What a finish."),
    ("sports", "My uncle keeps sending me clips of {team} highlights."),
    ("television", "Everyone at the office keeps talking about {show}, I haven't seen it."),
    ("animals", "I watched a documentary about the {pet} last night, surprisingly good."),
    ("coffee", "I've had {n} coffees already today, that can't be healthy."),
    ("plans", "Let's grab lunch sometime soon, I mean it this time."),
    ("shopping", "The supermarket was out of almost everything on {day}."),
    ("the city", "They closed the main road again for construction."),
    ("the weekend", "The weekend went by way too fast."),
    ("the weekend", "Did you do anything fun on {day}?"),
    ("funny stories", "Ha, that reminds me of something funny that happened at the bus stop."),
    ("being tired", "Sorry, I'm a bit distracted today, long night."),
    ("catching up", "Anyway, enough about that, it's nice to just chat."),
    ("holidays", "I can't believe the holidays are coming up so soon."),
    ("books", "I started a book on the train and already forgot the title."),
)
CHAT_SLOTS = {
    "weather": _v("gloomy|humid|windy|chilly|sunny|unpredictable|rainy|foggy|muggy|freezing"),
    "day": _v("Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday"),
    "n": tuple(str(n) for n in (5, 10, 15, 20, 25, 30, 40, 45, 50, 90)),
}

# Summary sentences (MSC/CC-style session summaries for the summariser task).
SUMMARY_OPEN = ("{main} talked with {partner}, {main}'s {role}, on {date}.",
                "On {date}, {main} caught up with {partner} ({role}).")
SUMMARY_FACT = ("{s} {vp}.", "{s} mentioned that they {you}.")
SUMMARY_UPDATE = ("{s} {vp_now}.", "{s} said that, since last time, they {you}.")
SUMMARY_RECALL = ("{main} recalled that {s} {vp}.",)
SUMMARY_CHAT = ("They also made small talk about {topics}.", "They chatted about {topics} as well.")

# Egocentric memory sentences (owner: the main speaker; third person).
MEMORY_FACT = "{s} {vp}."
MEMORY_UPDATE = "{s} {vp_now}."

# Queries (RealMem / LongMemEval style categories).
KU_SUFFIXES = (" now?", " these days?", " at the moment?", " currently?")
MULTI_ASK = ("What do you recall about {a}'s {n1} and {b}'s {n2}?",
             "Can you sum up {a}'s {n1} together with {b}'s {n2}?",
             "Putting our chats together, what are {a}'s {n1} and {b}'s {n2}?")
TEMPORAL_FIRST = ("When did {s} first mention their {noun}?",
                  "On what date did {s} first bring up their {noun}?")
TEMPORAL_ORDER = ("Which came up first in our conversations: {a}'s {n1} or {b}'s {n2}?",
                  "Did I hear about {a}'s {n1} or about {b}'s {n2} earlier?")
TEMPORAL_BEFORE = ("What was {s}'s {noun} before the most recent change?",
                   "Before switching, what was {s}'s {noun}?")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")

# Threads (RealMem's project threads): a query asked at the start of a later session of a thread names it vaguely
# ({hint}: one of the project's hints, or of its vague names when the question is paraphrased) and asks a slot
# question ({q}, with {s} = "I"); {when}: "" or " " + a time expression ("last week", "in March").
THREAD_ASK = ("About {hint} we discussed{when}, {q}",
              "So, {hint} we talked about{when}, {q}",
              "Back to {hint} we went over{when}, {q}")
THREAD_MULTI = ("what did {s} settle on for the {n1} and the {n2}?",
                "remind me of the {n1} and the {n2} {s} went with?")
THREAD_LAST = ("what did I decide last time?", "where did I leave it?", "what was my latest decision?")
MULTI_TWO = ("Two questions: {q1} And {q2}", "{Q1} And {q2}")
# A fact of the main speaker asked by whom it was told to (the session's partner: a name the session holds but the
# evidence turn may not).
TOLD_ASK = ("What did {s} tell {partner} about their {noun}?",
            "When {s} talked with {partner}, what did they say about their {noun}?")

# Questions that name a time ({when}: "in March", "on May 5", "two months ago", "last week", ...; {When}: the same,
# capitalised), resolved against the question's date by pipelines/memory/temporal.py's rules (never a colon after
# it: "on May 5:" reads as a clock time there, and only "May" is taken).
TIME_WRAP = ("From our chat {when}, {q_lower}", "Thinking back to our conversation {when}, {q_lower}")
TEMPORAL_AT = ("What was {s}'s {noun} when we talked {when}?",
               "{When}, what did {s} say their {noun} was?")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve")

# Paraphrase (a question's word -> words of the same meaning): a paraphrased question swaps each of its words that
# its evidence turns also use for one of these, so that it shares no such word with them (lexical match fails; a
# sentence embedding still matches). Every replacement reads in every question template the word occurs in.
SYNONYMS = {
    # threads
    "kitchen": ("cooking area",), "renovation": ("makeover", "overhaul"), "budget": ("spending limit",),
    "contractor": ("builder",), "countertops": ("work surfaces",), "worktops": ("work surfaces",),
    "wedding": ("ceremony",), "venue": ("location",), "guest": ("invitation",), "music": ("entertainment",),
    "book": ("reserve",), "podcast": ("audio show",), "episodes": ("instalments",), "novel": ("manuscript",),
    "title": ("name",), "publisher": ("publishing house",), "publish": ("print",), "cafe": ("espresso bar",),
    "pastry": ("bake",), "party": ("celebration",), "cake": ("dessert",), "theme": ("motif",),
    # persona facts
    "live": ("reside",), "work": ("business",), "job": ("position",), "raised": ("brought up",),
    "animal": ("creature",), "pet": ("companion animal",), "spare": ("idle",), "best": ("most",),
    "studying": ("learning",), "classes": ("courses",), "planning": ("hoping",), "drive": ("get around in",),
    "allergic": ("sensitive",), "allergy": ("intolerance",), "language": ("tongue",), "series": ("programme",),
    "watching": ("following",), "collect": ("gather",), "volunteer": ("help out",), "money": ("cash",),
    "aside": ("away",), "preparing": ("getting ready",), "drink": ("sip",), "usual": ("regular",),
    "books": ("titles",), "sport": ("game",), "league": ("division",), "eating": ("meal",), "diet": ("eating plan",),
    "birthday": ("birth date",), "color": ("colour",), "grow": ("raise",), "plants": ("greenery",),
    "lessons": ("classes",), "skill": ("ability",), "rent": ("lease",), "place": ("spot",), "team": ("side",),
    "kids": ("children",), "children": ("kids",), "sibling": ("brother or sister",), "scared": ("frightened",),
}

# Small talk that names another speaker of the episode (a lexical look-alike of the questions naming them).
NAME_CHAT = ("{name} says hi, by the way.", "I bumped into {name} at the station on {day}.",
             "{name} and I should really catch up soon.", "Have you heard from {name} lately?")
SUMMARY_THREAD = ("They went over {label}.", "{main} gave {partner} an update on {label}.")

# Look-alike facts of people who are not speakers ({who}: one of THIRD_PARTIES, {vp}: a relation's third-person verb
# phrase with a value): what a question about a speaker's fact matches by meaning but not by name. They carry no
# triplet (the distractor turns of a distractor session).
THIRD_PARTIES = ("my cousin", "my neighbour", "my old roommate", "a friend of mine", "my boss", "my brother-in-law",
                 "someone at my gym", "my aunt", "a guy from work", "my landlady")
LOOK_ALIKES = ("Funny thing, {who} {vp}.", "Guess what, {who} {vp}.", "Apparently {who} {vp} now.",
               "I found out {who} {vp}, small world.")
LOOK_ALIKE_TOPIC = "other people's news"
