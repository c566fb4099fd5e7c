"""Natural-looking text for the synthetic crawl: per-language vocabularies, sentence
templates, boilerplate strings, PII snippets, spam and near-duplicate edits.

Sentences are template-filled from topic vocabularies so that a language identifier
sees real function words and word order, not word salad.  Verbs are stored already
inflected for a singular subject (past tense for English, present elsewhere) and
objects already in the object case, so no grammar engine is needed.  Objects are a
short head plus an optional complement, drawn without replacement within an article,
so that clean pages pass n-gram repetition filters (Gopher-style) like real prose.
"""

from __future__ import annotations

import functools
import random
import re
import string
from dataclasses import dataclass

from gpupipe.kernels.script_class import HAN, in_class

TOPICS = ("science", "travel", "cooking", "history", "technology", "sports")
TOPICS_PER_ARTICLE = 2


def _split(s: str) -> tuple[str, ...]:
    return tuple(s.split("|"))


@dataclass(frozen=True)
class Topic:
    subjects: tuple[str, ...]
    verbs: tuple[str, ...]
    heads: tuple[str, ...]  # object noun phrases
    complements: tuple[str, ...]  # attach to any head of the topic (prefix modifiers in Chinese)


def _topic(subjects: str, verbs: str, heads: str, complements: str) -> Topic:
    return Topic(_split(subjects), _split(verbs), _split(heads), _split(complements))


@dataclass(frozen=True)
class Language:
    code: str
    sep: str  # word separator: "" for Chinese
    topics: dict[str, Topic]
    times: tuple[str, ...]
    manners: tuple[str, ...]
    connectives: tuple[str, ...]
    conjunctions: tuple[str, ...]
    comments: tuple[str, ...]
    templates: tuple[str, ...]
    pii_templates: tuple[str, ...]
    ui: dict[str, str]
    nav: tuple[str, ...]
    sites: tuple[str, ...]


# ---------------------------------------------------------------------------- English
EN = Language(
    code="en",
    sep=" ",
    topics={
        "science": _topic(
            "the research team|a young biologist|the laboratory|our science editor|the physicist"
            "|a group of chemists|the university|the new study",
            "measured|analyzed|described|questioned|confirmed|published|tested|explained",
            "small particles|the climate data|a surprising pattern|the protein structure|thousands of samples"
            "|the experiment|the rock layers|a new theory|the ocean chemistry|the bacteria|the test results"
            "|the magnetic field",
            "from the northern glacier|in the laboratory|over several months|under the microscope"
            "|from the deep sea|in the desert|at low temperatures|in the control group",
        ),
        "travel": _topic(
            "the traveler|our travel writer|a small group of tourists|the local guide|the young couple"
            "|the hotel owner|the ferry captain",
            "visited|explored|recommended|photographed|crossed|discovered|described|booked",
            "the narrow streets|a quiet village|the famous cathedral|the night market|a small hotel"
            "|the coastal path|the old stone bridge|a hidden beach|the national park|the fishing port"
            "|the mountain pass|the royal gardens",
            "of the old town|in the mountains|near the harbor|on the island|by the river|outside the capital"
            "|in the north|behind the station",
        ),
        "cooking": _topic(
            "the chef|my grandmother|the baker|the restaurant|a home cook|the food critic|the cooking school",
            "prepared|served|seasoned|tasted|baked|roasted|improved|shared",
            "a tomato soup|fresh bread|the family recipe|fish & chips|roasted vegetables|a chocolate cake"
            "|spicy noodles|homemade pasta|a lemon sauce|the apple pie|grilled lamb|a green salad",
            "with garlic and herbs|for the whole family|with a pinch of salt & pepper|from the local market"
            "|in a cast iron pan|for the evening guests|with fresh butter|on a cold evening",
        ),
        "history": _topic(
            "the historian|the old king|the city council|the museum|an archaeologist|the medieval church"
            "|the local archive",
            "recorded|restored|studied|defended|rebuilt|uncovered|preserved|documented",
            "the castle walls|old letters|a Roman villa|the harbor records|the trade routes|the temple ruins"
            "|ancient coins|the war diaries|the first maps|the monastery archive|the city gates"
            "|a medieval chronicle",
            "from the nineteenth century|of the old kingdom|near the cathedral|in the royal library"
            "|of the merchant families|from the siege|under the market square|of the northern provinces",
        ),
        "technology": _topic(
            "the software company|our engineering team|the developer|the startup|a security researcher"
            "|the new device|the mobile app",
            "released|updated|designed|improved|tested|replaced|launched|secured",
            "the web browser|the phone battery|the storage service|a programming language|the R&D budget"
            "|the home network|an open source library|the search engine|the data center|the operating system"
            "|the payment system|the smart watch",
            "for older devices|in the cloud|with better encryption|for small businesses|in the latest update"
            "|across all platforms|for remote workers|without extra cost",
        ),
        "sports": _topic(
            "the coach|the home team|the young striker|the goalkeeper|the marathon runner"
            "|the tennis player|the captain",
            "won|lost|trained for|celebrated|prepared for|dominated|described|missed",
            "the final match|the championship title|an away game|the first half|the world record"
            "|the penalty shootout|the next tournament|the training session|the local derby|the mountain race"
            "|the team bus|the new stadium",
            "of the season|in the rain|against the leaders|in front of the fans|after extra time"
            "|at the national stadium|in the cup|under the lights",
        ),
    },
    times=_split(
        "last year|in the spring|every morning|during the summer|in recent years|after a long winter"
        "|at the end of the week|for the first time|two days later|in the past decade|on a rainy day"
        "|earlier this month"
    ),
    manners=_split(
        "with great care|without much effort|in a surprising way|more quickly than expected"
        "|for the whole afternoon|with a lot of patience|in front of a large crowd|despite the bad weather"
        "|in a quiet corner|with obvious pride"
    ),
    connectives=_split(
        "However|Meanwhile|As a result|In addition|For example|Surprisingly|At the same time|In the end"
        "|Of course|Nevertheless"
    ),
    conjunctions=_split("and|but|because|while|although|so"),
    comments=_split(
        "Few people expected such a result.|This was not the first time."
        "|The story quickly spread across the region.|Many readers wrote to us about it."
        "|It is easy to see why.|Nobody could say what would happen next."
        "|The details are still being discussed.|Local newspapers covered the event for weeks."
    ),
    templates=(
        "{s} {v} {o}.",
        "{s} {v} {o} {time}.",
        "{time}, {s} {v} {o}.",
        "{conn}, {s} {v} {o} {manner}.",
        "{s} {v} {o}, {conj} {s2} {v2} {o2}.",
        "{s} {v} {o} {manner}.",
        "As {s} noted, {s2} {v2} {o2}.",
        "{comment}",
    ),
    pii_templates=(
        "For more information, contact {email} or call {phone}.",
        "Readers can reach the author at {email} or by phone at {phone}.",
    ),
    ui={
        "cookie": "We use cookies to personalise content and ads and to analyse our traffic. "
        "By clicking \u201cAccept all\u201d you agree to the use of cookies.",
        "accept": "Accept all",
        "reject": "Reject",
        "share": "Share on",
        "related": "Related articles",
        "popular": "Popular posts",
        "rights": "All rights reserved.",
        "privacy": "Privacy policy",
        "terms": "Terms of use",
        "newsletter": "Subscribe to our newsletter and never miss a story.",
        "subscribe": "Subscribe",
    },
    nav=_split("Home|News|World|Science|Travel|Food|Sports|Technology|Contact|About us"),
    sites=_split("dailyharbor.com|northwind-news.com|thekitchenjournal.net|wanderlog.org|techpulse.io"),
)

# ---------------------------------------------------------------------------- Chinese
ZH = Language(
    code="zh",
    sep="",
    topics={
        "science": _topic(
            "研究团队|这位年轻的生物学家|实验室的工作人员|大学的科学家们|这项新研究|一组化学家|物理学教授",
            "测量了|分析了|描述了|证实了|发表了|研究了|解释了|重新检验了",
            "微小颗粒|气候数据|意外规律|蛋白质结构|大量样本|实验数据|岩层|新理论|海洋化学成分|细菌|测试结果|磁场",
            "北方冰川的|实验室里的|几个月来的|显微镜下的|深海中的|沙漠里的|低温环境下的|对照组的",
        ),
        "travel": _topic(
            "这位旅行者|我们的旅游记者|一小群游客|当地的导游|这对年轻夫妇|酒店老板|渡轮船长",
            "参观了|探索了|推荐了|拍摄了|走过了|发现了|介绍了|预订了",
            "狭窄街道|安静村庄|著名大教堂|夜市|小旅馆|步行小路|古老石桥|隐秘海滩|国家公园|渔港|山口|皇家花园",
            "老城区的|山里的|港口附近的|岛上的|河边的|首都郊外的|北方的|火车站后面的",
        ),
        "cooking": _topic(
            "这位厨师|我的奶奶|面包师傅|这家餐厅|一位家庭主妇|美食评论家|烹饪学校的老师",
            "做了|端上了|品尝了|烤制了|改进了|分享了|准备了|调好了",
            "西红柿汤|新鲜面包|家传菜谱|红烧鱼|烤蔬菜|巧克力蛋糕|麻辣面条|手工饺子|柠檬酱|苹果派|烤羊肉|蔬菜沙拉",
            "加了蒜和香草的|全家人都爱吃的|撒了一点盐的|本地市场买来的|铁锅里做的|招待客人的|加了黄油的|冬天晚上的",
        ),
        "history": _topic(
            "这位历史学家|古代的皇帝|市政府|博物馆|一位考古学家|中世纪的教堂|地方档案馆",
            "记录了|修复了|研究了|保卫了|重建了|发掘了|保存了|整理了",
            "城墙|旧书信|古罗马别墅|港口档案|贸易路线|寺庙废墟|古代钱币|战争日记|早期地图|寺院文献|城门|编年史",
            "十九世纪的|古老王国的|大教堂附近的|皇家图书馆里的|商人家族的|围城时期的|市场广场下面的|北方各省的",
        ),
        "technology": _topic(
            "这家软件公司|我们的工程团队|一名开发者|这家初创企业|一位安全研究人员|新款设备|这款手机应用",
            "发布了|更新了|设计了|优化了|测试了|替换了|推出了|加固了",
            "浏览器|手机电池|存储服务|编程语言|研发预算|家庭网络|开源软件库|搜索引擎|数据中心|操作系统|支付系统|智能手表",
            "面向旧设备的|云端的|加密更强的|面向小企业的|最新版本的|跨平台的|适合远程办公的|免费的",
        ),
        "sports": _topic(
            "主教练|主队|年轻的前锋|守门员|马拉松选手|这位网球运动员|队长",
            "赢得了|输掉了|备战了|庆祝了|主导了|错过了|参加了|回顾了",
            "决赛|冠军头衔|客场比赛|上半场|世界纪录|点球大战|锦标赛|训练课|同城德比|山地赛跑|球队大巴|新体育场",
            "本赛季的|雨中的|对阵领头羊的|主场球迷面前的|加时赛后的|国家体育场的|杯赛中的|灯光下的",
        ),
    },
    times=_split(
        "去年|今年春天|每天早上|整个夏天|近年来|漫长的冬天过后|周末的时候|第一次|两天以后|在过去的十年里|今天早上|冬天"
    ),
    manners=_split("非常认真地|毫不费力地|出人意料地|比预想的更快地|耐心地|在众人面前|不顾恶劣的天气|仔细地|自豪地|不慌不忙地"),
    connectives=_split("然而|与此同时|因此|此外|例如|令人惊讶的是|同时|最后|当然|尽管如此"),
    conjunctions=_split("而且|但是|因为|所以|不过"),
    comments=_split(
        "很少有人预料到这样的结果。|这已经不是第一次了。|这个消息很快传遍了整个地区。"
        "|许多读者给我们写信谈论这件事。|原因其实并不难理解。|没有人知道接下来会发生什么。"
        "|相关细节仍在讨论之中。|当地报纸连续几周报道了这件事。"
    ),
    templates=(
        "{s}{v}{o}。",
        "{time}，{s}{v}{o}。",
        "{conn}，{s}{manner}{v}{o}。",
        "{s}{manner}{v}{o}。",
        "{time}，{s}{v}{o}，{conj}{s2}{v2}{o2}。",
        "{s}{v}{o}，{conj}{s2}{v2}{o2}。",
        "据{s}介绍，{s2}{v2}{o2}。",
        "{comment}",
    ),
    # Spaces around Latin-script PII, as Chinese sites usually write it.
    pii_templates=(
        "如有任何问题，请发送邮件至 {email} 或拨打 {phone} 联系我们。",
        "读者可以通过 {email} 或电话 {phone} 联系作者。",
    ),
    ui={
        "cookie": "我们使用Cookie来改善您的浏览体验并分析网站流量。点击“全部接受”即表示您同意我们使用Cookie。",
        "accept": "全部接受",
        "reject": "拒绝",
        "share": "分享到",
        "related": "相关文章",
        "popular": "热门文章",
        "rights": "版权所有",
        "privacy": "隐私政策",
        "terms": "使用条款",
        "newsletter": "订阅我们的新闻通讯，不错过任何精彩内容。",
        "subscribe": "订阅",
    },
    nav=_split("首页|新闻|国际|科学|旅游|美食|体育|科技|联系我们|关于我们"),
    sites=_split("news.hualin.cn|shenghuo.com.cn|lvxing365.cn|keji-ribao.cn"),
)

# ---------------------------------------------------------------------------- French
FR = Language(
    code="fr",
    sep=" ",
    topics={
        "science": _topic(
            "l'équipe de recherche|une jeune biologiste|le laboratoire|notre rédacteur scientifique"
            "|le physicien|un groupe de chimistes|l'université|la nouvelle étude",
            "mesure|analyse|décrit|remet en question|confirme|publie|teste|explique",
            "les petites particules|les données climatiques|une tendance surprenante|la structure de la protéine"
            "|des milliers d'échantillons|l'expérience|les couches de roche|une nouvelle théorie"
            "|la chimie de l'océan|les bactéries|les résultats des tests|le champ magnétique",
            "du glacier du nord|au laboratoire|pendant plusieurs mois|sous le microscope"
            "|des grands fonds marins|dans le désert|à basse température|du groupe témoin",
        ),
        "travel": _topic(
            "le voyageur|notre journaliste de voyage|un petit groupe de touristes|le guide local"
            "|le jeune couple|la propriétaire de l'hôtel|le capitaine du ferry",
            "visite|explore|recommande|photographie|traverse|découvre|décrit|réserve",
            "les ruelles étroites|un village tranquille|la célèbre cathédrale|le marché de nuit|un petit hôtel"
            "|le sentier côtier|le vieux pont de pierre|une plage cachée|le parc national|le port de pêche"
            "|le col de montagne|les jardins royaux",
            "de la vieille ville|dans les montagnes|près du port|sur l'île|au bord de la rivière"
            "|loin de la capitale|dans le nord|derrière la gare",
        ),
        "cooking": _topic(
            "le chef|ma grand-mère|le boulanger|le restaurant|une cuisinière amateur"
            "|le critique gastronomique|l'école de cuisine",
            "prépare|sert|assaisonne|goûte|fait cuire|améliore|partage|recommande",
            "une soupe à la tomate|du pain frais|la recette familiale|un poisson grillé|des légumes rôtis"
            "|un gâteau au chocolat|des nouilles épicées|des pâtes maison|une sauce au citron"
            "|la tarte aux pommes|un gigot d'agneau|une salade verte",
            "à l'ail et aux herbes|pour toute la famille|avec une pincée de sel|du marché local"
            "|dans une poêle en fonte|pour les invités du soir|au beurre frais|par un soir d'hiver",
        ),
        "history": _topic(
            "l'historien|le vieux roi|le conseil municipal|le musée|une archéologue|l'église médiévale"
            "|le service des archives",
            "étudie|restaure|défend|reconstruit|découvre|conserve|documente|raconte",
            "les murs du château|de vieilles lettres|une villa romaine|les registres du port"
            "|les routes commerciales|les ruines du temple|des pièces anciennes|les journaux de guerre"
            "|les premières cartes|les archives du monastère|les portes de la ville|une chronique médiévale",
            "du dix-neuvième siècle|de l'ancien royaume|près de la cathédrale|de la bibliothèque royale"
            "|des familles de marchands|du temps du siège|sous la place du marché|des provinces du nord",
        ),
        "technology": _topic(
            "l'entreprise de logiciels|notre équipe d'ingénieurs|le développeur|la jeune entreprise"
            "|un chercheur en sécurité|le nouvel appareil|l'application mobile",
            "lance|met à jour|conçoit|améliore|teste|remplace|présente|sécurise",
            "le navigateur web|la batterie du téléphone|le service de stockage|un langage de programmation"
            "|le budget de recherche|le réseau domestique|une bibliothèque libre|le moteur de recherche"
            "|le centre de données|le système d'exploitation|le système de paiement|la montre connectée",
            "pour les anciens appareils|dans le nuage|avec un meilleur chiffrement|pour les petites entreprises"
            "|dans la dernière mise à jour|sur toutes les plateformes|pour le télétravail"
            "|sans frais supplémentaires",
        ),
        "sports": _topic(
            "l'entraîneur|l'équipe locale|le jeune attaquant|le gardien de but|la coureuse de marathon"
            "|le joueur de tennis|le capitaine",
            "remporte|perd|prépare|célèbre|domine|manque|raconte|analyse",
            "le dernier match|le titre de champion|un match à l'extérieur|la première mi-temps"
            "|le record du monde|la séance de tirs au but|le prochain tournoi|la séance d'entraînement"
            "|le derby local|la course de montagne|le bus de l'équipe|le nouveau stade",
            "de la saison|sous la pluie|contre les leaders|devant les supporters|après les prolongations"
            "|au stade national|en coupe|sous les projecteurs",
        ),
    },
    times=_split(
        "chaque matin|au printemps|pendant l'été|ces jours-ci|souvent|aujourd'hui|cette semaine"
        "|chaque année|pour la première fois|de temps en temps|ce matin|en hiver"
    ),
    manners=_split(
        "avec beaucoup de soin|sans grand effort|d'une manière surprenante|plus vite que prévu"
        "|pendant tout l'après-midi|avec une grande patience|devant une foule nombreuse"
        "|malgré le mauvais temps|avec une fierté évidente|sans se presser"
    ),
    connectives=_split(
        "Cependant|Pendant ce temps|Par conséquent|De plus|Par exemple|Curieusement|En même temps"
        "|Finalement|Bien sûr|Néanmoins"
    ),
    conjunctions=_split("et|mais|car|tandis que|alors que|donc"),
    comments=_split(
        "Peu de gens s'attendaient à un tel résultat.|Ce n'était pas la première fois."
        "|La nouvelle s'est vite répandue dans toute la région.|De nombreux lecteurs nous ont écrit à ce sujet."
        "|Il est facile de comprendre pourquoi.|Personne ne savait ce qui allait se passer."
        "|Les détails sont encore en discussion.|Les journaux locaux en ont parlé pendant des semaines."
    ),
    templates=(
        "{s} {v} {o}.",
        "{s} {v} {o} {time}.",
        "{time}, {s} {v} {o}.",
        "{conn}, {s} {v} {o} {manner}.",
        "{s} {v} {o}, {conj} {s2} {v2} {o2}.",
        "{s} {v} {o} {manner}.",
        "Comme le souligne {s}, {s2} {v2} {o2}.",
        "{comment}",
    ),
    pii_templates=(
        "Pour plus d'informations, écrivez à {email} ou appelez le {phone}.",
        "Les lecteurs peuvent joindre l'auteur à l'adresse {email} ou au {phone}.",
    ),
    ui={
        "cookie": "Nous utilisons des cookies pour personnaliser le contenu et analyser notre trafic. "
        "En cliquant sur « Tout accepter », vous acceptez l'utilisation des cookies.",
        "accept": "Tout accepter",
        "reject": "Refuser",
        "share": "Partager sur",
        "related": "Articles similaires",
        "popular": "Articles populaires",
        "rights": "Tous droits réservés.",
        "privacy": "Politique de confidentialité",
        "terms": "Conditions d'utilisation",
        "newsletter": "Abonnez-vous à notre lettre d'information.",
        "subscribe": "S'abonner",
    },
    nav=_split("Accueil|Actualités|Monde|Sciences|Voyages|Cuisine|Sport|Technologie|Contact|À propos"),
    sites=_split("lemonde-des-voyages.fr|cuisine-et-terroir.fr|actu-sciences.fr"),
)

# ---------------------------------------------------------------------------- German
DE = Language(
    code="de",
    sep=" ",
    topics={
        "science": _topic(
            "das Forschungsteam|eine junge Biologin|das Labor|unser Wissenschaftsredakteur|der Physiker"
            "|eine Gruppe von Chemikern|die Universität|die neue Studie",
            "misst|analysiert|beschreibt|hinterfragt|bestätigt|veröffentlicht|untersucht|erklärt",
            "kleine Teilchen|die Klimadaten|ein überraschendes Muster|die Struktur des Proteins|tausende Proben"
            "|das Experiment|die Gesteinsschichten|eine neue Theorie|die Chemie des Ozeans|die Bakterien"
            "|die Testergebnisse|das Magnetfeld",
            "aus dem nördlichen Gletscher|im Labor|über mehrere Monate|unter dem Mikroskop|aus der Tiefsee"
            "|in der Wüste|bei niedrigen Temperaturen|aus der Kontrollgruppe",
        ),
        "travel": _topic(
            "der Reisende|unsere Reisejournalistin|eine kleine Gruppe von Touristen|der örtliche Reiseführer"
            "|das junge Paar|die Besitzerin des Hotels|der Kapitän der Fähre",
            "besucht|erkundet|empfiehlt|fotografiert|überquert|entdeckt|beschreibt|bucht",
            "die engen Gassen|ein ruhiges Dorf|den berühmten Dom|den Nachtmarkt|ein kleines Hotel"
            "|den Küstenweg|die alte Steinbrücke|einen versteckten Strand|den Nationalpark|den Fischerhafen"
            "|den Bergpass|die königlichen Gärten",
            "in der Altstadt|in den Bergen|am Hafen|auf der Insel|am Fluss|außerhalb der Hauptstadt"
            "|im Norden|hinter dem Bahnhof",
        ),
        "cooking": _topic(
            "der Koch|meine Großmutter|der Bäcker|das Restaurant|ein Hobbykoch|die Restaurantkritikerin"
            "|die Kochschule",
            "serviert|würzt|probiert|backt|verbessert|teilt|kocht|empfiehlt",
            "eine Tomatensuppe|frisches Brot|das Familienrezept|gebratenen Fisch|geröstetes Gemüse"
            "|einen Schokoladenkuchen|scharfe Nudeln|hausgemachte Pasta|eine Zitronensoße|den Apfelkuchen"
            "|gegrilltes Lamm|einen grünen Salat",
            "mit Knoblauch und Kräutern|für die ganze Familie|mit einer Prise Salz|vom Wochenmarkt"
            "|aus der gusseisernen Pfanne|für die Abendgäste|mit frischer Butter|an einem kalten Abend",
        ),
        "history": _topic(
            "der Historiker|der alte König|der Stadtrat|das Museum|eine Archäologin"
            "|die mittelalterliche Kirche|das Stadtarchiv",
            "erforscht|restauriert|verteidigt|untersucht|entdeckt|bewahrt|dokumentiert|beschreibt",
            "die Mauern der Burg|alte Briefe|eine römische Villa|die Hafenbücher|die Handelswege"
            "|die Ruinen des Tempels|alte Münzen|die Kriegstagebücher|die ersten Landkarten|das Klosterarchiv"
            "|die Stadttore|eine mittelalterliche Chronik",
            "aus dem neunzehnten Jahrhundert|des alten Königreichs|neben der Kathedrale"
            "|aus der königlichen Bibliothek|der Kaufmannsfamilien|aus der Zeit der Belagerung"
            "|unter dem Marktplatz|der nördlichen Provinzen",
        ),
        "technology": _topic(
            "das Softwareunternehmen|unser Entwicklerteam|die Entwicklerin|das junge Unternehmen"
            "|ein Sicherheitsforscher|das neue Gerät|die mobile App",
            "veröffentlicht|aktualisiert|entwickelt|verbessert|testet|ersetzt|präsentiert|schützt",
            "den Webbrowser|den Akku des Telefons|den Speicherdienst|eine Programmiersprache"
            "|das Forschungsbudget|das Heimnetzwerk|eine freie Bibliothek|die Suchmaschine|das Rechenzentrum"
            "|das Betriebssystem|das Bezahlsystem|die Smartwatch",
            "für ältere Geräte|in der Cloud|mit besserer Verschlüsselung|für kleine Unternehmen"
            "|im neuesten Update|auf allen Plattformen|für das Homeoffice|ohne zusätzliche Kosten",
        ),
        "sports": _topic(
            "der Trainer|die Heimmannschaft|der junge Stürmer|der Torwart|die Marathonläuferin"
            "|der Tennisspieler|die Kapitänin",
            "gewinnt|verliert|bestreitet|feiert|dominiert|verpasst|analysiert|erwartet",
            "das letzte Spiel|den Meistertitel|ein Auswärtsspiel|die erste Halbzeit|den Weltrekord"
            "|das Elfmeterschießen|das nächste Turnier|das Training|das Lokalderby|das Bergrennen"
            "|den Mannschaftsbus|das neue Stadion",
            "der Saison|im Regen|gegen den Tabellenführer|vor den Fans|nach der Verlängerung"
            "|im Nationalstadion|im Pokal|unter Flutlicht",
        ),
    },
    times=_split(
        "jeden Morgen|im Frühling|im Sommer|in diesen Tagen|oft|heute|diese Woche|jedes Jahr"
        "|zum ersten Mal|ab und zu|heute Morgen|im Winter"
    ),
    manners=_split(
        "mit großer Sorgfalt|ohne große Mühe|auf überraschende Weise|schneller als erwartet"
        "|den ganzen Nachmittag|mit viel Geduld|vor einem großen Publikum|trotz des schlechten Wetters"
        "|mit sichtbarem Stolz|ohne Eile"
    ),
    connectives=_split(
        "Trotzdem|Inzwischen|Deshalb|Außerdem|Zum Beispiel|Überraschenderweise|Gleichzeitig|Am Ende"
        "|Natürlich|Dennoch"
    ),
    conjunctions=_split("und|aber|denn|doch"),
    comments=_split(
        "Kaum jemand hatte mit einem solchen Ergebnis gerechnet.|Es war nicht das erste Mal."
        "|Die Nachricht verbreitete sich schnell in der ganzen Region.|Viele Leser haben uns darüber geschrieben."
        "|Es ist leicht zu verstehen, warum.|Niemand wusste, was als Nächstes passieren würde."
        "|Die Einzelheiten werden noch diskutiert.|Die Lokalzeitungen berichteten wochenlang darüber."
    ),
    # German is verb-second: a fronted time phrase, adverb or clause moves the subject after the verb.
    templates=(
        "{s} {v} {o}.",
        "{s} {v} {o} {time}.",
        "{time} {v} {s} {o}.",
        "{conn} {v} {s} {o} {manner}.",
        "{s} {v} {o}, {conj} {s2} {v2} {o2}.",
        "{s} {v} {o} {manner}.",
        "Wie {s} berichtet, {v2} {s2} {o2}.",
        "{comment}",
    ),
    pii_templates=(
        "Für weitere Informationen schreiben Sie an {email} oder rufen Sie {phone} an.",
        "Leser erreichen die Redaktion unter {email} oder telefonisch unter {phone}.",
    ),
    ui={
        "cookie": "Wir verwenden Cookies, um Inhalte zu personalisieren und unseren Datenverkehr zu analysieren. "
        "Mit einem Klick auf „Alle akzeptieren“ stimmen Sie der Verwendung von Cookies zu.",
        "accept": "Alle akzeptieren",
        "reject": "Ablehnen",
        "share": "Teilen auf",
        "related": "Ähnliche Artikel",
        "popular": "Beliebte Beiträge",
        "rights": "Alle Rechte vorbehalten.",
        "privacy": "Datenschutzerklärung",
        "terms": "Nutzungsbedingungen",
        "newsletter": "Abonnieren Sie unseren Newsletter.",
        "subscribe": "Abonnieren",
    },
    nav=_split("Startseite|Nachrichten|Welt|Wissenschaft|Reisen|Essen|Sport|Technik|Kontakt|Über uns"),
    sites=_split("tagesblick.de|reisezeit.de|technikwelt.de"),
)

# ---------------------------------------------------------------------------- Spanish
ES = Language(
    code="es",
    sep=" ",
    topics={
        "science": _topic(
            "el equipo de investigación|una joven bióloga|el laboratorio|nuestro redactor de ciencia|el físico"
            "|un grupo de químicos|la universidad|el nuevo estudio",
            "mide|analiza|describe|cuestiona|confirma|publica|pone a prueba|explica",
            "las partículas pequeñas|los datos climáticos|un patrón sorprendente|la estructura de la proteína"
            "|miles de muestras|el experimento|las capas de roca|una nueva teoría|la química del océano"
            "|las bacterias|los resultados de las pruebas|el campo magnético",
            "del glaciar del norte|en el laboratorio|durante varios meses|bajo el microscopio"
            "|de las profundidades del mar|en el desierto|a bajas temperaturas|del grupo de control",
        ),
        "travel": _topic(
            "el viajero|nuestra periodista de viajes|un pequeño grupo de turistas|el guía local"
            "|la joven pareja|la dueña del hotel|el capitán del ferry",
            "visita|explora|recomienda|fotografía|cruza|descubre|describe|reserva",
            "las calles estrechas|un pueblo tranquilo|la famosa catedral|el mercado nocturno|un pequeño hotel"
            "|el sendero de la costa|el viejo puente de piedra|una playa escondida|el parque nacional"
            "|el puerto pesquero|el paso de montaña|los jardines reales",
            "del casco antiguo|en las montañas|cerca del puerto|en la isla|junto al río|lejos de la capital"
            "|en el norte|detrás de la estación",
        ),
        "cooking": _topic(
            "el cocinero|mi abuela|el panadero|el restaurante|una cocinera aficionada|el crítico gastronómico"
            "|la escuela de cocina",
            "prepara|sirve|sazona|prueba|hornea|mejora|comparte|cocina",
            "una sopa de tomate|pan recién hecho|la receta familiar|pescado a la plancha|verduras asadas"
            "|un pastel de chocolate|fideos picantes|pasta casera|una salsa de limón|la tarta de manzana"
            "|cordero asado|una ensalada verde",
            "con ajo y hierbas|para toda la familia|con una pizca de sal|del mercado local"
            "|en una sartén de hierro|para los invitados|con mantequilla fresca|en una noche fría",
        ),
        "history": _topic(
            "el historiador|el viejo rey|el ayuntamiento|el museo|una arqueóloga|la iglesia medieval"
            "|el archivo municipal",
            "estudia|restaura|defiende|reconstruye|descubre|conserva|documenta|relata",
            "las murallas del castillo|cartas antiguas|una villa romana|los registros del puerto"
            "|las rutas comerciales|las ruinas del templo|monedas antiguas|los diarios de guerra"
            "|los primeros mapas|el archivo del monasterio|las puertas de la ciudad|una crónica medieval",
            "del siglo diecinueve|del antiguo reino|cerca de la catedral|de la biblioteca real"
            "|de las familias de comerciantes|de la época del asedio|bajo la plaza del mercado"
            "|de las provincias del norte",
        ),
        "technology": _topic(
            "la empresa de software|nuestro equipo de ingenieros|la desarrolladora|la empresa emergente"
            "|un investigador de seguridad|el nuevo dispositivo|la aplicación móvil",
            "lanza|actualiza|diseña|mejora|prueba|sustituye|presenta|protege",
            "el navegador web|la batería del teléfono|el servicio de almacenamiento|un lenguaje de programación"
            "|el presupuesto de investigación|la red doméstica|una biblioteca libre|el motor de búsqueda"
            "|el centro de datos|el sistema operativo|el sistema de pagos|el reloj inteligente",
            "para dispositivos antiguos|en la nube|con mejor cifrado|para pequeñas empresas"
            "|en la última actualización|en todas las plataformas|para el teletrabajo|sin coste adicional",
        ),
        "sports": _topic(
            "el entrenador|el equipo local|el joven delantero|el portero|la corredora de maratón|el tenista"
            "|el capitán",
            "gana|pierde|prepara|celebra|domina|analiza|recuerda|juega",
            "el último partido|el título de campeón|un partido fuera de casa|la primera parte|el récord mundial"
            "|la tanda de penaltis|el próximo torneo|la sesión de entrenamiento|el derbi local"
            "|la carrera de montaña|el autobús del equipo|el nuevo estadio",
            "de la temporada|bajo la lluvia|contra el líder|ante la afición|tras la prórroga"
            "|en el estadio nacional|en la copa|bajo los focos",
        ),
    },
    times=_split(
        "cada mañana|en primavera|durante el verano|estos días|a menudo|hoy|esta semana|cada año"
        "|por primera vez|de vez en cuando|esta mañana|en invierno"
    ),
    manners=_split(
        "con mucho cuidado|sin gran esfuerzo|de una manera sorprendente|más rápido de lo esperado"
        "|durante toda la tarde|con mucha paciencia|ante un público numeroso|a pesar del mal tiempo"
        "|con evidente orgullo|sin prisa"
    ),
    connectives=_split(
        "Sin embargo|Mientras tanto|Por eso|Además|Por ejemplo|Curiosamente|Al mismo tiempo|Al final"
        "|Por supuesto|No obstante"
    ),
    conjunctions=_split("y|pero|porque|mientras|así que"),
    comments=_split(
        "Pocas personas esperaban un resultado así.|No era la primera vez."
        "|La noticia se extendió rápidamente por toda la región.|Muchos lectores nos escribieron sobre el tema."
        "|Es fácil entender por qué.|Nadie sabía lo que iba a pasar."
        "|Los detalles todavía se están discutiendo.|Los periódicos locales hablaron del asunto durante semanas."
    ),
    templates=(
        "{s} {v} {o}.",
        "{s} {v} {o} {time}.",
        "{time}, {s} {v} {o}.",
        "{conn}, {s} {v} {o} {manner}.",
        "{s} {v} {o}, {conj} {s2} {v2} {o2}.",
        "{s} {v} {o} {manner}.",
        "Como explica {s}, {s2} {v2} {o2}.",
        "{comment}",
    ),
    pii_templates=(
        "Para más información, escriba a {email} o llame al {phone}.",
        "Los lectores pueden contactar con la autora en {email} o en el teléfono {phone}.",
    ),
    ui={
        "cookie": "Utilizamos cookies para personalizar el contenido y analizar nuestro tráfico. "
        "Al hacer clic en «Aceptar todo» usted acepta el uso de cookies.",
        "accept": "Aceptar todo",
        "reject": "Rechazar",
        "share": "Compartir en",
        "related": "Artículos relacionados",
        "popular": "Lo más leído",
        "rights": "Todos los derechos reservados.",
        "privacy": "Política de privacidad",
        "terms": "Condiciones de uso",
        "newsletter": "Suscríbase a nuestro boletín.",
        "subscribe": "Suscribirse",
    },
    nav=_split("Inicio|Noticias|Mundo|Ciencia|Viajes|Cocina|Deportes|Tecnología|Contacto|Quiénes somos"),
    sites=_split("diariodelsur.es|viajeros.es|cocinaconamor.es"),
)

# ---------------------------------------------------------------------------- Russian
RU = Language(
    code="ru",
    sep=" ",
    topics={
        "science": _topic(
            "исследовательская группа|молодой биолог|лаборатория|наш научный редактор|физик|группа химиков"
            "|университет|новое исследование",
            "измеряет|анализирует|описывает|ставит под сомнение|подтверждает|публикует|проверяет|объясняет",
            "мелкие частицы|климатические данные|неожиданную закономерность|структуру белка|тысячи образцов"
            "|эксперимент|слои горных пород|новую теорию|химию океана|бактерии|результаты испытаний"
            "|магнитное поле",
            "с северного ледника|в лаборатории|в течение нескольких месяцев|под микроскопом|из глубин океана"
            "|в пустыне|при низких температурах|из контрольной группы",
        ),
        "travel": _topic(
            "путешественник|наш корреспондент|небольшая группа туристов|местный гид|молодая пара"
            "|хозяйка гостиницы|капитан парома",
            "посещает|исследует|рекомендует|фотографирует|пересекает|открывает для себя|описывает|бронирует",
            "узкие улицы|тихую деревню|знаменитый собор|ночной рынок|маленькую гостиницу|прибрежную тропу"
            "|старый каменный мост|укромный пляж|национальный парк|рыбацкий порт|горный перевал"
            "|королевские сады",
            "старого города|в горах|у гавани|на острове|у реки|за пределами столицы|на севере|за вокзалом",
        ),
        "cooking": _topic(
            "повар|моя бабушка|пекарь|ресторан|повар-любитель|ресторанный критик|кулинарная школа",
            "готовит|подаёт|приправляет|пробует|печёт|улучшает|варит|рекомендует",
            "томатный суп|свежий хлеб|семейный рецепт|жареную рыбу|запечённые овощи|шоколадный торт"
            "|острую лапшу|домашнюю пасту|лимонный соус|яблочный пирог|жареную баранину|зелёный салат",
            "с чесноком и травами|для всей семьи|с щепоткой соли|с местного рынка|на чугунной сковороде"
            "|для вечерних гостей|со свежим маслом|холодным вечером",
        ),
        "history": _topic(
            "историк|старый король|городской совет|музей|женщина-археолог|средневековая церковь"
            "|городской архив",
            "изучает|реставрирует|защищает|восстанавливает|находит|хранит|документирует|описывает",
            "стены крепости|старые письма|римскую виллу|портовые книги|торговые пути|руины храма"
            "|старинные монеты|военные дневники|первые карты|архив монастыря|городские ворота"
            "|средневековую летопись",
            "девятнадцатого века|древнего королевства|возле собора|из королевской библиотеки|купеческих семей"
            "|времён осады|под рыночной площадью|северных провинций",
        ),
        "technology": _topic(
            "компания-разработчик|наша команда инженеров|программист|молодая компания"
            "|специалист по безопасности|новое устройство|мобильное приложение",
            "выпускает|обновляет|разрабатывает|улучшает|тестирует|заменяет|представляет|защищает",
            "веб-браузер|аккумулятор телефона|облачный сервис|язык программирования|бюджет на исследования"
            "|домашнюю сеть|открытую библиотеку|поисковую систему|центр обработки данных"
            "|операционную систему|платёжную систему|умные часы",
            "для старых устройств|в облаке|с надёжным шифрованием|для малого бизнеса|в последнем обновлении"
            "|на всех платформах|для удалённой работы|без дополнительной платы",
        ),
        "sports": _topic(
            "тренер|местная команда|молодой нападающий|вратарь|марафонка|теннисист|капитан команды",
            "выигрывает|проигрывает|готовит|празднует|анализирует|пропускает|вспоминает|ждёт",
            "последний матч|чемпионский титул|выездной матч|первый тайм|мировой рекорд|серию пенальти"
            "|следующий турнир|тренировку|местное дерби|горную гонку|командный автобус|новый стадион",
            "сезона|под дождём|против лидеров|перед болельщиками|после дополнительного времени"
            "|на национальном стадионе|в кубке|при свете прожекторов",
        ),
    },
    times=_split(
        "каждое утро|весной|летом|в эти дни|часто|сегодня|на этой неделе|каждый год|впервые|иногда"
        "|этим утром|зимой"
    ),
    manners=_split(
        "с большой осторожностью|без особых усилий|неожиданным образом|быстрее, чем ожидалось|весь день"
        "|с большим терпением|перед большой толпой|несмотря на плохую погоду|с явной гордостью|не торопясь"
    ),
    connectives=_split(
        "Однако|Тем временем|Поэтому|Кроме того|Например|Как ни странно|В то же время|В конце концов"
        "|Конечно|Тем не менее"
    ),
    conjunctions=_split("и|но|потому что|а|поэтому"),
    comments=_split(
        "Мало кто ожидал такого результата.|Это случилось не в первый раз."
        "|Новость быстро распространилась по всему региону.|Многие читатели написали нам об этом."
        "|Понять причину нетрудно.|Никто не знал, что будет дальше.|Подробности всё ещё обсуждаются."
        "|Местные газеты писали об этом несколько недель."
    ),
    templates=(
        "{s} {v} {o}.",
        "{s} {v} {o} {time}.",
        "{time}, {s} {v} {o}.",
        "{conn}, {s} {v} {o} {manner}.",
        "{s} {v} {o}, {conj} {s2} {v2} {o2}.",
        "{s} {v} {o} {manner}.",
        "Как сообщает {s}, {s2} {v2} {o2}.",
        "{comment}",
    ),
    pii_templates=(
        "Для получения дополнительной информации пишите на {email} или звоните по телефону {phone}.",
        "Читатели могут связаться с автором по адресу {email} или по телефону {phone}.",
    ),
    ui={
        "cookie": "Мы используем файлы cookie, чтобы улучшить работу сайта и анализировать трафик. "
        "Нажимая «Принять все», вы соглашаетесь с использованием cookie.",
        "accept": "Принять все",
        "reject": "Отклонить",
        "share": "Поделиться в",
        "related": "Похожие статьи",
        "popular": "Популярное",
        "rights": "Все права защищены.",
        "privacy": "Политика конфиденциальности",
        "terms": "Условия использования",
        "newsletter": "Подпишитесь на нашу рассылку.",
        "subscribe": "Подписаться",
    },
    nav=_split("Главная|Новости|В мире|Наука|Путешествия|Еда|Спорт|Технологии|Контакты|О нас"),
    sites=_split("novosti-dnya.ru|puteshestvie.ru|tehnoblog.ru"),
)

LANGUAGES: dict[str, Language] = {lang.code: lang for lang in (EN, ZH, FR, DE, ES, RU)}

# French elides "que" before a vowel ("tandis qu'une ..."); the templates cannot know.
_FR_ELISION = re.compile(r"\bque (?=[aeiouhéèêâîôûAEIOUÉ])")


# ---------------------------------------------------------------------------- articles
def _capitalize(s: str) -> str:
    return s[:1].upper() + s[1:]


class _Deck:
    """Draws phrases without replacement (reshuffling when a pile runs out), so one
    article rarely repeats a phrase; repeated n-grams would trip repetition filters."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.piles: dict[tuple[str, str], list[str]] = {}

    def draw(self, slot: str, topic: str, items: tuple[str, ...]) -> str:
        pile = self.piles.get((slot, topic))
        if not pile:
            pile = self.piles[slot, topic] = list(items)
            self.rng.shuffle(pile)
        return pile.pop()


def _object(lang: Language, topic: str, deck: _Deck) -> str:
    t = lang.topics[topic]
    head = deck.draw("head", topic, t.heads)
    if deck.rng.random() < 0.5:
        return head
    complement = deck.draw("complement", topic, t.complements)
    return complement + head if not lang.sep else f"{head} {complement}"


def _slot(name: str, lang: Language, topic: str, deck: _Deck) -> str:
    kind = name.rstrip("2")  # "s2" is a second subject, etc.
    t = lang.topics[topic]
    if kind == "o":
        return _object(lang, topic, deck)
    if kind in ("s", "v"):
        return deck.draw(kind, topic, t.subjects if kind == "s" else t.verbs)
    shared = {"time": lang.times, "manner": lang.manners, "conn": lang.connectives,
              "conj": lang.conjunctions, "comment": lang.comments}
    return deck.draw(kind, "", shared[kind])


def _sentence(lang: Language, topic: str, deck: _Deck) -> str:
    template = deck.draw("template", "", lang.templates)
    names = [name for _, name, _, _ in string.Formatter().parse(template) if name]
    text = _capitalize(template.format(**{name: _slot(name, lang, topic, deck) for name in names}))
    return _FR_ELISION.sub("qu'", text) if lang.code == "fr" else text


def _title(lang: Language, topic: str, deck: _Deck) -> str:
    return _capitalize(lang.sep.join(_slot(name, lang, topic, deck) for name in ("s", "v", "o")))


def article(lang: Language, rng: random.Random) -> tuple[str, list[str]]:
    """A title and 3-8 paragraphs of 2-6 sentences, each paragraph on one of the article's topics."""
    topics = rng.sample(TOPICS, TOPICS_PER_ARTICLE)
    deck = _Deck(rng)
    paragraphs = []
    for _ in range(rng.randint(3, 8)):
        topic = rng.choice(topics)
        paragraphs.append(lang.sep.join(_sentence(lang, topic, deck) for _ in range(rng.randint(2, 6))))
    return _title(lang, topics[0], deck), paragraphs


def headline(lang: Language, rng: random.Random) -> str:
    """A stand-alone article title (sidebar links, related articles)."""
    return _title(lang, rng.choice(TOPICS), _Deck(rng))


# ---------------------------------------------------------------------------- PII
_FIRST = _split("jane|john|maria|peter|anna|david|laura|michael|sophie|thomas|elena|lucas")
_LAST = _split("doe|smith|garcia|muller|martin|rossi|novak|brown|dubois|schmidt|lopez|ivanova")
_ZH_NAMES = _split("wang.fang|li.wei|zhang.min|liu.yang|chen.jing|zhao.lei|huang.li|zhou.tao")
_MAIL_DOMAINS = {
    "en": _split("example.com|mail.example.org|gmail.com|outlook.com"),
    "zh": _split("qq.com|163.com|example.cn|sina.com"),
    "fr": _split("orange.fr|example.fr|laposte.net"),
    "de": _split("web.de|example.de|gmx.de"),
    "es": _split("example.es|gmail.com|telefonica.net"),
    "ru": _split("yandex.ru|mail.ru|example.ru"),
}


def _phone(code: str, rng: random.Random) -> str:
    r = rng.randint
    if code == "zh":
        return f"{rng.choice((134, 135, 136, 138, 139, 150, 158, 186, 188))}{r(0, 10**8 - 1):08d}"
    if code == "fr":
        return f"+33 {r(1, 9)} " + " ".join(f"{r(0, 99):02d}" for _ in range(4))
    if code == "de":
        return f"+49 {rng.choice((30, 40, 69, 89, 221))} {r(1000000, 9999999)}"
    if code == "es":
        return f"+34 {r(600, 999)} {r(0, 999):03d} {r(0, 999):03d}"
    if code == "ru":
        return f"+7 {r(900, 999)} {r(0, 999):03d}-{r(0, 99):02d}-{r(0, 99):02d}"
    return f"+1 {r(201, 989)}-555-{r(100, 199):04d}"  # 555-01xx numbers are reserved as fictional


def _email(code: str, rng: random.Random) -> str:
    user = rng.choice(_ZH_NAMES) if code == "zh" else f"{rng.choice(_FIRST)}.{rng.choice(_LAST)}"
    return f"{user}@{rng.choice(_MAIL_DOMAINS[code])}"


def pii_sentence(lang: Language, rng: random.Random) -> tuple[str, list[str]]:
    """A contact sentence and the e-mail address and phone number it contains."""
    email, phone = _email(lang.code, rng), _phone(lang.code, rng)
    return rng.choice(lang.pii_templates).format(email=email, phone=phone), [email, phone]


# ---------------------------------------------------------------------------- spam
_PRODUCTS = _split("watches|sneakers|sunglasses|handbags|phones|pills|perfume|jerseys")
SPAM_DOMAINS = _split("best-deals-4u.biz|cheap-outlet.top|megasale.click|free-prizes.xyz")
_REPEATED = _split(
    "Best online casino bonus win real money now|Make money fast from home no experience needed"
    "|Hot deals today only limited offer|Lose weight fast with this one simple trick"
)
_SHORT = _split("Coming soon.|Under construction.|Hello world!|Test page|Page 2 of 3|Click here.")
_ZH_KEYWORDS = _split("便宜手表|手表批发|名牌包包|低价促销|正品保证|全国包邮|厂家直销|高仿手表|限时特价|免费领取")
_SYMBOLS = _split("$$$|***|###|!!!|>>>|<<<|100%|+++|@@@|€€€|===|FREE|WIN|$")


def _keyword_spam(rng: random.Random) -> tuple[str, str, list[str]]:
    if rng.random() < 0.4:
        paragraphs = [" ".join(rng.choices(_ZH_KEYWORDS, k=rng.randint(12, 24))) for _ in range(rng.randint(2, 5))]
        return "zh", " ".join(rng.sample(_ZH_KEYWORDS, 3)), paragraphs
    p = rng.choice(_PRODUCTS)
    keywords = (f"cheap {p}", f"best {p}", f"{p} sale", f"buy {p} online", f"discount {p}",
                f"{p} free shipping", f"replica {p}", f"{p} outlet")
    paragraphs = [", ".join(rng.choices(keywords, k=rng.randint(15, 30))) for _ in range(rng.randint(2, 5))]
    return "en", f"Cheap {p} | Best {p} | {p} sale", paragraphs


def _repeated_spam(rng: random.Random) -> tuple[str, str, list[str]]:
    line = rng.choice(_REPEATED)
    return "en", line, [line] * rng.randint(15, 40)


def _click_spam(rng: random.Random) -> tuple[str, str, list[str]]:
    lines = []
    for _ in range(rng.randint(8, 20)):
        p = rng.choice(_PRODUCTS)
        lines.append(f"Buy cheap {p} online now!!! {rng.randint(50, 90)}% OFF Click here >>> "
                     f"http://{rng.choice(SPAM_DOMAINS)}/{p}?id={rng.randint(1000, 9999)}")
    return "en", "Click here for the best deals", lines


def _symbol_spam(rng: random.Random) -> tuple[str, str, list[str]]:
    def token() -> str:
        return str(rng.randint(0, 99999)) if rng.random() < 0.5 else rng.choice(_SYMBOLS)

    lines = [" ".join(token() for _ in range(rng.randint(10, 20))) for _ in range(rng.randint(5, 15))]
    return "en", "$$$ WIN 100% FREE $$$", lines


def _short_spam(rng: random.Random) -> tuple[str, str, list[str]]:
    if rng.random() < 0.3:
        return "zh", "网站建设中", ["网站建设中，敬请期待。"]
    line = rng.choice(_SHORT)
    return "en", line.rstrip(".!"), [line]


def spam_article(rng: random.Random) -> tuple[str, str, list[str]]:
    """(lang, title, paragraphs) of a low-quality page, one of five common spam shapes."""
    make = rng.choice((_keyword_spam, _repeated_spam, _click_spam, _symbol_spam, _short_spam))
    return make(rng)


# ---------------------------------------------------------------------------- near duplicates
@functools.lru_cache(maxsize=None)
def _vocabulary(code: str) -> tuple[str, ...]:
    """Replacement/insertion material: single words, or whole phrases for Chinese."""
    lang = LANGUAGES[code]
    phrases = [p for t in lang.topics.values() for p in t.subjects + t.verbs + t.heads + t.complements]
    if not lang.sep:
        return tuple(sorted(set(phrases)))
    return tuple(sorted({w for p in phrases for w in p.split() if w.isalpha()}))


def _editable(token: str, code: str) -> bool:
    # Only touch real words / Han characters (a Chinese token is one character) so punctuation and sentence ends
    # survive.
    return in_class(ord(token), HAN) if code == "zh" else token.isalpha()


def near_duplicate(text: str, code: str, rng: random.Random) -> str:
    """`text` with 0.5-1% of its words (characters for Chinese), at least one, replaced, preceded by an
    inserted word, or deleted; paragraph breaks and punctuation are kept. Each edit touches at most k
    shingles, so the shingle Jaccard to the original stays around 0.9: clearly above the usual 0.8
    threshold, which lets the ground truth score near-dedup precision and recall."""
    sep = LANGUAGES[code].sep
    paragraphs = [para.split(sep) if sep else list(para) for para in text.split("\n\n")]
    spots = [(i, j) for i, tokens in enumerate(paragraphs) for j, tok in enumerate(tokens) if _editable(tok, code)]
    n_edits = max(1, round(rng.uniform(0.005, 0.01) * sum(map(len, paragraphs))))
    vocab = _vocabulary(code)
    # Back to front, so earlier positions stay valid.
    for i, j in sorted(rng.sample(spots, min(n_edits, len(spots))), reverse=True):
        tokens = paragraphs[i]
        op = rng.choice(("replace", "insert", "delete"))
        if op == "replace":
            tokens[j] = rng.choice([w for w in vocab if w != tokens[j]])
        elif op == "insert":
            tokens.insert(j, rng.choice(vocab))
        else:
            del tokens[j]
    edited = "\n\n".join(sep.join(tokens) for tokens in paragraphs)
    return edited if edited != text else near_duplicate(text, code, rng)  # edits that cancel out


# ---------------------------------------------------------------------------- planted leaks and boilerplate
# Long paragraphs that sites paste into article bodies (author bios, house notes). A few pages of the
# crawl carry one of them verbatim, so substring dedup has repeated spans of >= 400 bytes to find.
SYNDICATED_PARAGRAPHS: dict[str, tuple[str, ...]] = {
    "en": (
        "About the author: Morgan Ellery has covered science, travel and food for regional newspapers for "
        "more than fifteen years. Before turning to journalism, Morgan worked as a field assistant on "
        "coastal research projects and still spends most summers walking the shoreline with a notebook. "
        "Morgan's reporting has been recognized by several regional press associations, and this column "
        "appears every other week on partner sites across the network.",
        "Editor's note: This article is part of our weekly series in which readers send in questions and "
        "our reporters go looking for answers. We check every claim with at least two independent sources "
        "before publication, and we correct mistakes openly at the end of the piece. If you have noticed "
        "something in your own town that deserves a closer look, our editors read every suggestion and "
        "answer as many as they can in the following issue.",
    ),
    "zh": (
        "编者按：本文是我们每周读者来信栏目的一部分。读者把身边遇到的问题寄给编辑部，记者再去实地走访，寻找答案。"
        "每一篇稿件在发表之前，我们都会向至少两个独立的来源核实其中的说法；如果发现错误，我们会在文章末尾公开更正。"
        "如果您在自己生活的城市里发现了值得关注的事情，欢迎随时告诉我们，编辑会认真阅读每一条建议。",
    ),
}

LEAK_LEADINS: dict[str, tuple[str, ...]] = {
    "en": ("", "", "Here is a practice problem from last week's worksheet: ",
           "A reader sent us this question from a quiz: ", "Try this one yourself. "),
    "zh": ("", "下面是一道练习题：", "有读者发来这样一道题："),
}

_ASCII_PUNCT = str.maketrans("", "", ",.?!;:$")
_ZH_PUNCT_TO_ASCII = str.maketrans({"，": ",", "。": ".", "？": "?", "：": ":", "（": "(", "）": ")", "！": "!"})


def leak_variant(text: str, variant: int, code: str) -> str:
    """A copy of a benchmark item with a trivial change that the decontamination normalization
    undoes: none, case, punctuation, whitespace (by `variant`, cycling)."""
    if code == "zh":
        changes = (lambda t: t,
                   lambda t: t.translate(_ZH_PUNCT_TO_ASCII),
                   lambda t: " ".join(t),                                 # a space between characters
                   lambda t: re.sub(r"[，。？：！]", "", t))
    else:
        changes = (lambda t: t,
                   lambda t: t.lower(),
                   lambda t: t.translate(_ASCII_PUNCT),
                   lambda t: t.upper(),
                   lambda t: t.replace(" ", "  ").replace(". ", " - "))
    return changes[variant % len(changes)](text)
