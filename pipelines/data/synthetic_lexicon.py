"""Word lists and templates of the synthetic mixed-session generator (``synthetic.py``).

Data only: names, relationships, the fact relations with their entity pools and paraphrased
templates, chit-chat, and the query templates. Every relation has several first-person surface
forms (direct and indirect, e.g. "I work as a nurse." / "Long day at work again, that's life as a
nurse."), third-person phrases for egocentric memories (MiSC section 3.3: memories are written
from the main speaker's perspective), and questions worded unlike the statements, so that a
question never repeats its evidence turn and lexical and dense retrieval behave differently.

Placeholders: ``{o}`` the object (entity), ``{a_o}`` the object with its indefinite article,
``{s}`` a speaker's name (questions), ``{name}`` another speaker's name.
"""

from __future__ import annotations

from dataclasses import dataclass


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
        _v("sail|surf|sew|ski|juggle|weld|code in Python|ice skate|ride a unicycle|brew beer|"
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

RELATION_BY_NAME = {r.name: r for r in RELATIONS}

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
